"""Typed records through Spark: from_avro and to_avro against strom's schema registry, with records
written and read by confluent-kafka's AvroSerializer and AvroDeserializer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
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


def produce_avro(bootstrap: str, registry: SchemaRegistryClient, topic: str, schema: dict[str, Any],
                 records: list[dict[str, Any]]) -> None:
    serialize = AvroSerializer(registry, json.dumps(schema))
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


def test_10000_avro_records_into_typed_columns(spark: Any, registry_broker: Any) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    create_topic(b, "rides", 2)
    registry = SchemaRegistryClient({"url": url})
    want = [ride(i) for i in range(10_000)]
    produce_avro(b, registry, "rides", RIDE, want)

    df = read(spark, b, "rides").select(from_avro("value", subject="rides-value", registry_url=url).alias("r"))
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


def test_v1_and_v2_records_read_in_v2_shape(spark: Any, registry_broker: Any) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    create_topic(b, "evolving", 1)
    registry = SchemaRegistryClient({"url": url})
    v1 = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": "int"}]}
    v2 = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": "long"},  # int promoted to long
        {"name": "unit", "type": "string", "default": "celsius"},
        {"name": "quality", "type": ["null", "double"], "default": None}]}
    produce_avro(b, registry, "evolving", v1, [{"sensor": f"s{i}", "value": i} for i in range(3)])
    produce_avro(b, registry, "evolving", v2, [{"sensor": f"s{i}", "value": 2**40 + i, "unit": "kelvin",
                                                "quality": 0.5} for i in range(3, 5)])
    # v1 once more after v2: the batch interleaves the writer schemas
    produce_avro(b, registry, "evolving", v1, [{"sensor": "s5", "value": 5}])
    ids = {registry.get_version("evolving-value", v).schema_id for v in (1, 2)}
    assert len(ids) == 2

    df = (read(spark, b, "evolving").select("offset", from_avro("value", subject="evolving-value", registry_url=url)
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
    from pyspark.sql import functions as F

    b, url = registry_broker.bootstrap, registry_broker.registry_url
    registry = SchemaRegistryClient({"url": url})
    from confluent_kafka.schema_registry import Schema
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


def test_malformed_values_fail_fast_or_become_null(spark: Any, registry_broker: Any) -> None:
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    create_topic(b, "mixed", 1)
    registry = SchemaRegistryClient({"url": url})
    schema = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}
    produce_avro(b, registry, "mixed", schema, [{"n": 1}])
    p = Producer({"bootstrap.servers": b})
    p.produce("mixed", value=b"{not avro")  # no magic byte
    p.produce("mixed", value=None)           # a tombstone
    assert p.flush(10) == 0
    produce_avro(b, registry, "mixed", schema, [{"n": 2}])

    permissive = (read(spark, b, "mixed").orderBy("offset")
                  .select(from_avro("value", subject="mixed-value", registry_url=url, mode="PERMISSIVE").alias("r")))
    assert [r.r.n if r.r is not None else None for r in permissive.collect()] == [1, None, None, 2]

    failfast = read(spark, b, "mixed").select(from_avro("value", subject="mixed-value", registry_url=url).alias("r"))
    with pytest.raises(Exception, match="not Confluent-framed Avro"):
        failfast.collect()


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
