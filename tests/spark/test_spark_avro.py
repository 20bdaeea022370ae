"""Typed records through Spark: from_avro and to_avro against strom's schema registry, with records
written and read by confluent-kafka's AvroSerializer and AvroDeserializer. from_avro's two engines
(the Java UDF of strom's jar, which the test session has, and the Arrow UDF, its path without the
jar) give the same answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import functions as F
from spark_helpers import consume_all, create_topic

from strom.spark import from_avro, to_avro

pytestmark = pytest.mark.timeout(240)

RIDE = {
    "type": "record", "name": "Ride", "namespace": "trucks",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "seats", "type": "int"},
        {"name": "distance", "type": "double"},
        {"name": "fare", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "driver", "type": "string"},
        {"name": "token", "type": "bytes"},
        {"name": "origin", "type": {"type": "record", "name": "Place", "fields": [
            {"name": "city", "type": "string"}, {"name": "lat", "type": "double"}]}},
        {"name": "stops", "type": {"type": "array", "items": "Place"}},
        {"name": "tolls", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "dropoff", "type": ["null", "Place"], "default": None},
    ],
}


def ride(i: int) -> dict[str, Any]:
    return {
        "id": 10**12 + i, "seats": i % 7, "distance": i * 0.25, "fare": float(i % 100) + 0.5, "paid": i % 3 == 0,
        "driver": f"driver-{i % 50}", "token": i.to_bytes(4, "big"),
        "origin": {"city": f"city-{i % 9}", "lat": 35.0 + i % 10},
        "stops": [{"city": f"stop-{j}", "lat": float(j)} for j in range(i % 3)],
        "tolls": {f"gate-{j}": i + j for j in range(i % 2 + 1)},
        "note": None if i % 4 else f"note {i}",
        "dropoff": None if i % 2 else {"city": f"city-{i % 5}", "lat": 36.0},
    }


ENGINES = pytest.mark.parametrize("engine", ["jvm", "arrow"])


def produce_avro(bootstrap: str, registry: SchemaRegistryClient, topic: str, schema: dict[str, Any] | Schema,
                 records: list[dict[str, Any]]) -> None:
    serialize = AvroSerializer(registry, schema if isinstance(schema, Schema) else json.dumps(schema))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in records:
        value = serialize(r, SerializationContext(topic, MessageField.VALUE))
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def read(spark: Any, bootstrap: str, topic: str) -> Any:
    return (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


@ENGINES
def test_10000_avro_records_into_typed_columns(spark: Any, registry_broker: Any, engine: str) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"rides-{engine}"
    create_topic(b, topic, 2)
    registry = SchemaRegistryClient({"url": url})
    want = [ride(i) for i in range(10_000)]
    produce_avro(b, registry, topic, RIDE, want)

    column = from_avro("value", subject=f"{topic}-value", registry_url=url, engine=engine)
    assert ("strom_from_avro_" in str(column)) == (engine == "jvm"), column
    df = read(spark, b, topic).select(column.alias("r"))
    typed = df.select("r.*")
    assert [f.name for f in typed.schema.fields] == [f["name"] for f in RIDE["fields"]]
    assert typed.schema.simpleString() == (
        "struct<id:bigint,seats:int,distance:double,fare:float,paid:boolean,driver:string,token:binary,"
        "origin:struct<city:string,lat:double>,stops:array<struct<city:string,lat:double>>,"
        "tolls:map<string,bigint>,note:string,dropoff:struct<city:string,lat:double>>")

    rows = typed.collect()
    assert len(rows) == 10_000
    got = sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["id"])
    for r in got:
        r["token"] = bytes(r["token"])
    assert got == want


@ENGINES
def test_v1_and_v2_records_read_in_v2_shape(spark: Any, registry_broker: Any, engine: str) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"evolving-{engine}"
    create_topic(b, topic, 1)
    registry = SchemaRegistryClient({"url": url})
    v1 = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": "int"}]}
    v2 = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": "long"},  # int promoted to long
        {"name": "unit", "type": "string", "default": "celsius"},
        {"name": "quality", "type": ["null", "double"], "default": None}]}
    produce_avro(b, registry, topic, v1, [{"sensor": f"s{i}", "value": i} for i in range(3)])
    produce_avro(b, registry, topic, v2, [{"sensor": f"s{i}", "value": 2**40 + i, "unit": "kelvin",
                                           "quality": 0.5} for i in range(3, 5)])
    # v1 once more after v2: the batch interleaves the writer schemas
    produce_avro(b, registry, topic, v1, [{"sensor": "s5", "value": 5}])
    ids = {registry.get_version(f"{topic}-value", v).schema_id for v in (1, 2)}
    assert len(ids) == 2

    df = (read(spark, b, topic).select("offset", from_avro("value", subject=f"{topic}-value", registry_url=url,
                                                           engine=engine)
                                       .alias("r")).orderBy("offset").select("r.*"))
    assert df.schema.simpleString() == "struct<sensor:string,value:bigint,unit:string,quality:double>"
    assert [r.asDict() for r in df.collect()] == [
        {"sensor": "s0", "value": 0, "unit": "celsius", "quality": None},
        {"sensor": "s1", "value": 1, "unit": "celsius", "quality": None},
        {"sensor": "s2", "value": 2, "unit": "celsius", "quality": None},
        {"sensor": "s3", "value": 2**40 + 3, "unit": "kelvin", "quality": 0.5},
        {"sensor": "s4", "value": 2**40 + 4, "unit": "kelvin", "quality": 0.5},
        {"sensor": "s5", "value": 5, "unit": "celsius", "quality": None},
    ]


def test_to_avro_read_back_by_avro_deserializer(spark: Any, registry_broker: Any) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    registry = SchemaRegistryClient({"url": url})
    schema_id = registry.register_schema("rides-out-value", Schema(json.dumps(RIDE), "AVRO"))
    create_topic(b, "rides-out", 1)
    want = [ride(i) for i in range(200)]
    source = spark.createDataFrame([(json.dumps({**r, "token": r["token"].hex()}),) for r in want], "j string")
    struct_type = from_avro_type(url)
    rows = source.select(F.from_json("j", struct_type.replace("token:binary", "token:string")).alias("r")).select(
        F.struct(*[F.unhex("r.token").alias("token") if f["name"] == "token" else F.col(f"r.{f['name']}")
                   for f in RIDE["fields"]]).alias("ride"))
    (rows.select(to_avro("ride", subject="rides-out-value", registry_url=url).alias("value"))
     .write.format("strom").mode("append").option("kafka.bootstrap.servers", b).option("topic", "rides-out").save())

    deserialize = AvroDeserializer(registry)
    messages = consume_all(b, "rides-out", len(want))
    assert len(messages) == len(want)
    got = []
    for m in messages:
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == schema_id
        got.append(deserialize(m.value(), SerializationContext("rides-out", MessageField.VALUE)))
    assert sorted(got, key=lambda r: r["id"]) == want

    # and from_avro reads what to_avro wrote
    back = read(spark, b, "rides-out").select(from_avro("value", subject="rides-out-value", registry_url=url)
                                              .alias("r")).select("r.id", "r.tolls", "r.note").collect()
    assert sorted((r.id, r.tolls, r.note) for r in back) == sorted((r["id"], r["tolls"], r["note"]) for r in want)


def from_avro_type(url: str) -> str:
    """The DDL of RIDE's struct, as from_avro types it."""
    from strom.spark.avro_codec import expanded, parse
    from strom.spark.avro_types import spark_type

    return str(spark_type(expanded(parse(json.dumps(RIDE)))).simpleString())


@ENGINES
def test_malformed_values_fail_fast_or_become_null(spark: Any, registry_broker: Any, engine: str) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"mixed-{engine}"
    create_topic(b, topic, 1)
    registry = SchemaRegistryClient({"url": url})
    schema = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}
    produce_avro(b, registry, topic, schema, [{"n": 1}])
    p = Producer({"bootstrap.servers": b})
    p.produce(topic, value=b"{not avro")  # no magic byte
    p.produce(topic, value=None)           # a tombstone
    p.produce(topic, value=b"\x00\x00\x00\x7f\x00\x02")  # framed, but an id the registry does not have
    assert p.flush(10) == 0
    produce_avro(b, registry, topic, schema, [{"n": 2}])

    permissive = (read(spark, b, topic).orderBy("offset")
                  .select(from_avro("value", subject=f"{topic}-value", registry_url=url, mode="PERMISSIVE",
                                    engine=engine).alias("r")))
    assert [r.r.n if r.r is not None else None for r in permissive.collect()] == [1, None, None, None, 2]

    failfast = read(spark, b, topic).select(from_avro("value", subject=f"{topic}-value", registry_url=url,
                                                      engine=engine).alias("r"))
    with pytest.raises(Exception, match="not Confluent-framed Avro"):
        failfast.collect()


PLACE = {"type": "record", "name": "Place", "namespace": "geo",
         "fields": [{"name": "city", "type": "string"}, {"name": "lat", "type": "double"}]}
TRIP = {"type": "record", "name": "Trip", "namespace": "trucks", "fields": [
    {"name": "id", "type": "long"},
    {"name": "origin", "type": "geo.Place"},
    {"name": "stops", "type": {"type": "array", "items": "geo.Place"}},
    {"name": "dropoff", "type": ["null", "geo.Place"], "default": None}]}


@ENGINES
def test_a_record_type_defined_in_a_referenced_subject(spark: Any, registry_broker: Any, engine: str) -> None:
    """A schema that names a record type of another subject (a reference, as confluent-kafka's
    AvroSerializer registers them) is decoded and encoded with that type; AvroDeserializer reads
    what to_avro wrote."""
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"trips-{engine}"
    create_topic(b, topic, 2)
    registry = SchemaRegistryClient({"url": url})
    registry.register_schema(f"geo-place-{engine}", Schema(json.dumps(PLACE), "AVRO"))
    trip = Schema(json.dumps(TRIP), "AVRO", [SchemaReference("geo.Place", f"geo-place-{engine}", 1)])
    want = [{"id": i, "origin": {"city": f"c{i % 7}", "lat": i * 0.5},
             "stops": [{"city": f"s{j}", "lat": float(j)} for j in range(i % 3)],
             "dropoff": None if i % 2 else {"city": "end", "lat": 1.5}} for i in range(1000)]
    produce_avro(b, registry, topic, trip, want)
    assert registry.get_latest_version(f"{topic}-value").schema.references

    df = read(spark, b, topic).select(from_avro("value", subject=f"{topic}-value", registry_url=url,
                                                engine=engine).alias("t")).select("t.*")
    assert df.schema.simpleString() == ("struct<id:bigint,origin:struct<city:string,lat:double>,"
                                        "stops:array<struct<city:string,lat:double>>,"
                                        "dropoff:struct<city:string,lat:double>>")
    assert sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["id"]) == want

    out = f"trips-out-{engine}"
    create_topic(b, out, 1)
    (df.select(to_avro(F.struct("*"), subject=f"{topic}-value", registry_url=url).alias("value"))
     .write.format("strom").mode("append").option("kafka.bootstrap.servers", b).option("topic", out).save())
    deserialize = AvroDeserializer(registry)
    got = [deserialize(m.value(), SerializationContext(out, MessageField.VALUE))
           for m in consume_all(b, out, len(want))]
    assert sorted(got, key=lambda r: r["id"]) == want


@ENGINES
def test_a_writer_schema_registered_after_the_column_is_fetched(spark: Any, registry_broker: Any,
                                                               engine: str) -> None:
    """Records of a version registered after from_avro was defined (a long-running query): each
    executor fetches that writer schema by its id and reads the records in the column's shape."""
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"later-{engine}"
    create_topic(b, topic, 1)
    registry = SchemaRegistryClient({"url": url})
    v1 = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}
    v2 = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"},
                                                       {"name": "tag", "type": "string", "default": "-"}]}
    produce_avro(b, registry, topic, v1, [{"n": 1}])
    column = from_avro("value", subject=f"{topic}-value", registry_url=url, engine=engine)
    produce_avro(b, registry, topic, v2, [{"n": 2, "tag": "x"}])
    assert registry.get_latest_version(f"{topic}-value").version == 2
    rows = read(spark, b, topic).orderBy("offset").select(column.alias("t")).select("t.*").collect()
    assert [r.asDict() for r in rows] == [{"n": 1}, {"n": 2}]


def test_from_avro_takes_the_arrow_path_where_the_jar_is_not(spark: Any, registry_broker: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """engine="auto" decodes in the JVM where the session has strom's jar (the test session does),
    and falls back to the Arrow UDF where the class cannot be loaded; engine="jvm" then says why."""
    from strom.spark import jvm

    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = "fallback"
    create_topic(b, topic, 1)
    registry = SchemaRegistryClient({"url": url})
    produce_avro(b, registry, topic, {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]},
                 [{"n": i} for i in range(50)])
    assert jvm.jar_path() is not None and jvm.has_class(spark, jvm.AVRO_DECODE)
    assert "strom_from_avro_" in str(from_avro("value", subject=f"{topic}-value", registry_url=url))

    monkeypatch.setattr(jvm, "AVRO_DECODE", "strom.spark.NotThere")
    assert not jvm.has_class(spark, jvm.AVRO_DECODE)
    column = from_avro("value", subject=f"{topic}-value", registry_url=url)
    assert "strom_from_avro_" not in str(column) and "decode" in str(column), column
    assert sorted(r.t.n for r in read(spark, b, topic).select(column.alias("t")).collect()) == list(range(50))
    with pytest.raises(ValueError, match="needs a classic Spark session with strom's jar"):
        from_avro("value", subject=f"{topic}-value", registry_url=url, engine="jvm")


def test_source_decodes_values_itself(spark: Any, registry_broker: Any, tmp_path: Any) -> None:
    """The source's valueAvroSubject option: the same typed values as from_avro, decoded in the
    reader's own Arrow path; in a batch read and in a stream, older writer schemas resolved."""
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    create_topic(b, "in-source", 2)
    registry = SchemaRegistryClient({"url": url})
    v1 = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}
    v2 = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"},
                                                       {"name": "tag", "type": "string", "default": "old"}]}
    produce_avro(b, registry, "in-source", v1, [{"n": i} for i in range(100)])
    produce_avro(b, registry, "in-source", v2, [{"n": i, "tag": "new"} for i in range(100, 300)])

    def load(reader: Any) -> Any:
        return (reader.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", "in-source")
                .option("valueAvroSubject", "in-source-value").option("schema.registry.url", url).load())

    df = load(spark.read)
    assert df.schema["value"].dataType.simpleString() == "struct<n:bigint,tag:string>"
    got = sorted((r.value.n, r.value.tag) for r in df.select("value").collect())
    assert got == [(i, "old") for i in range(100)] + [(i, "new") for i in range(100, 300)]
    via_udf = (read(spark, b, "in-source").select(from_avro("value", subject="in-source-value", registry_url=url)
                                                  .alias("value")))
    assert sorted(df.select("value").collect()) == sorted(via_udf.collect())

    query = (load(spark.readStream.option("startingOffsets", "earliest")).select("value.*")
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    assert spark.read.parquet(str(tmp_path / "out")).count() == 300

    with pytest.raises(Exception, match="needs 'schema.registry.url'"):
        (spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", "in-source")
         .option("valueAvroSubject", "in-source-value").load().collect())


LOGICAL = {"type": "record", "name": "Stamp", "namespace": "logic", "fields": [
    {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 3}},
    {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}},
    {"name": "when", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None}]}


@ENGINES
def test_logical_types_fixed_and_enums(spark: Any, registry_broker: Any, engine: str) -> None:
    import datetime as dt
    from decimal import Decimal

    b, url = registry_broker.bootstrap, registry_broker.registry_url
    topic = f"logical-{engine}"
    create_topic(b, topic, 1)
    utc = dt.UTC
    want = [{"at_ms": dt.datetime(2026, 11, 26, 12, 0, 0, 123000, tzinfo=utc),
             "at_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),  # before the epoch
             "day": dt.date(2026, 1, i + 1), "price": Decimal(f"{i}.05") - Decimal(3),
             "code": bytes([i, 0, 255]), "level": "HIGH" if i % 2 else "LOW",
             "when": None if i % 2 else dt.datetime(2000, 1, 1, tzinfo=utc)} for i in range(5)]
    produce_avro(b, SchemaRegistryClient({"url": url}), topic, LOGICAL, want)
    df = (read(spark, b, topic).orderBy("offset")
          .select(from_avro("value", subject=f"{topic}-value", registry_url=url, engine=engine).alias("s"))
          .select("s.*"))
    assert df.schema.simpleString() == ("struct<at_ms:timestamp,at_us:timestamp,day:date,price:decimal(9,2),"
                                        "code:binary,level:string,when:timestamp>")
    got = [r.asDict() for r in df.collect()]
    for row in got:
        row["code"] = bytes(row["code"])
        for k in ("at_ms", "at_us", "when"):  # PySpark hands naive datetimes in this process's local time
            row[k] = row[k].astimezone(utc) if row[k] is not None else None
    assert got == want
