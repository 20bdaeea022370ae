"""The strom data source in Spark (local[2]) against a real strom broker: batch read, streaming with
Trigger.AvailableNow and maxOffsetsPerTrigger, failOnDataLoss both ways, and the sink."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import Produced, consume_all, create_topic, produce

pytestmark = pytest.mark.timeout(300)


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _row_key(row: Any) -> tuple[Any, ...]:
    ts = row.timestamp  # naive local time from Spark; .timestamp() turns it back into the epoch
    headers = tuple((h.key, h.value) for h in row.headers) if row.headers is not None else None
    return (row.topic, row.partition, row.offset, row.key, row.value,
            int(round(ts.timestamp() * 1000)), row.timestampType, headers)


def _produced_key(p: Produced) -> tuple[Any, ...]:
    return (p.topic, p.partition, p.offset, p.key, p.value, p.timestamp_ms, p.timestamp_type, p.headers)


def test_batch_read_equals_what_was_produced(spark: Any, module_broker: Any) -> None:
    b = module_broker.bootstrap
    create_topic(b, "batch-create", 3)
    create_topic(b, "batch-append", 2, {"message.timestamp.type": "LogAppendTime"})
    rng = random.Random(5)
    records: list[dict[str, Any]] = []
    base_ts = 1_700_000_000_000
    for i in range(600):
        headers = None
        if i % 3 == 1:
            headers = [("trace", f"t{i}".encode()), ("n", None)]
        elif i % 3 == 2:
            headers = [("dup", b"1"), ("dup", b"2"), ("empty", b"")]
        records.append({
            "topic": "batch-create" if i % 4 else "batch-append",
            "key": None if i % 7 == 0 else f"k{rng.randrange(50)}".encode(),
            "value": None if i % 97 == 0 else rng.randbytes(rng.randrange(0, 300)),
            "timestamp": base_ts + rng.randrange(10**7),
            "headers": headers,
        })
    produced = produce(b, records)
    assert len(produced) == 600

    df = _reader(spark, b, subscribePattern="batch-.*", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    got = sorted(map(_row_key, rows), key=lambda r: (r[0], r[1], r[2]))
    want = sorted(map(_produced_key, produced), key=lambda r: (r[0], r[1], r[2]))
    assert len(got) == len(want) == 600
    assert got == want
    assert {r[6] for r in got if r[0] == "batch-append"} == {1}
    assert {r[6] for r in got if r[0] == "batch-create"} == {0}
    # offsets are dense per partition: 0..n-1
    for t, parts in (("batch-create", 3), ("batch-append", 2)):
        for p in range(parts):
            offs = [r[2] for r in got if r[0] == t and r[1] == p]
            assert offs == list(range(len(offs))) and offs

    # An exact range, split into more tasks than partitions, still reads each record once.
    df = _reader(spark, b, assign='{"batch-create":[0,1]}', startingOffsets='{"batch-create":{"0":3,"1":-2}}',
                 endingOffsets='{"batch-create":{"0":40,"1":-1}}', minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    got_range = sorted((r.partition, r.offset, r.value) for r in df.collect())
    want_range = sorted((p.partition, p.offset, p.value) for p in produced
                        if p.topic == "batch-create" and (p.partition == 0 and 3 <= p.offset < 40 or p.partition == 1))
    assert got_range == want_range

    # startingTimestamp: the first record at or after the timestamp, per partition
    cut = base_ts + 5 * 10**6
    df = _reader(spark, b, subscribe="batch-create", startingTimestamp=str(cut))
    first_after = {}
    for p in sorted(produced, key=lambda p: p.offset):
        if p.topic == "batch-create" and p.timestamp_ms >= cut and p.partition not in first_after:
            first_after[p.partition] = p.offset
    want_ts = sorted((p.partition, p.offset) for p in produced
                     if p.topic == "batch-create" and p.offset >= first_after[p.partition])
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == want_ts


def _available_now(spark: Any, b: str, pattern: str, out: Path, ck: Path, per_trigger: int) -> Any:
    query = (spark.readStream.format("strom").option("kafka.bootstrap.servers", b)
             .option("subscribePattern", pattern).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_trigger)).load()
             .select("topic", "partition", "offset", "value")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert not query.isActive
    assert query.exception() is None
    return query


def _end_offset(query: Any) -> Any:
    end = query.lastProgress["sources"][0]["endOffset"]
    return json.loads(end) if isinstance(end, str) else end


def test_available_now_with_max_offsets_per_trigger(spark: Any, module_broker: Any, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    b = module_broker.bootstrap
    out, ck = tmp_path / "out", tmp_path / "ck"
    create_topic(b, "avail", 2)
    produced = produce(b, [{"topic": "avail", "value": f"v{i}".encode(), "partition": i % 2} for i in range(1000)])
    query = _available_now(spark, b, "avail.*", out, ck, 100)
    per_batch = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    # 2 partitions x 500 records, 100 per trigger shared evenly: exactly 10 batches of 100.
    assert per_batch == [100] * 10
    assert _end_offset(query) == {"avail": {"0": 500, "1": 500}}

    # A new partition and a newly matching topic: the restarted query reads them from their start.
    admin = AdminClient({"bootstrap.servers": b})
    for f in admin.create_partitions([NewPartitions("avail", 3)]).values():
        f.result(timeout=30)
    create_topic(b, "avail-extra", 1)
    produced += produce(b, [{"topic": "avail", "value": f"n{i}".encode(), "partition": 2} for i in range(300)]
                        + [{"topic": "avail-extra", "value": f"x{i}".encode()} for i in range(300)])
    query = _available_now(spark, b, "avail.*", out, ck, 100)
    per_batch = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert per_batch == [100] * 6  # 2 new partitions x 300 records, 50 + 50 per trigger
    assert _end_offset(query) == {"avail": {"0": 500, "1": 500, "2": 300}, "avail-extra": {"0": 300}}
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.topic, r.partition, r.offset, r.value) for r in rows) == sorted(
        (p.topic, p.partition, p.offset, p.value) for p in produced)


def _run_until_done(spark: Any, b: str, topic: str, out: Path, ck: Path, **options: str) -> Any:
    reader = (spark.readStream.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().select("offset", "value").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
    # A failed query raises its StreamingQueryException here; the caller checks query.exception().
    with contextlib.suppress(Exception):
        query.awaitTermination(240)
    assert not query.isActive
    return query


def test_fail_on_data_loss_both_ways(spark: Any, module_broker: Any, tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b = module_broker.bootstrap
    create_topic(b, "lossy", 1)
    produce(b, [{"topic": "lossy", "value": f"v{i}".encode()} for i in range(30)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    first = _run_until_done(spark, b, "lossy", out, ck)
    assert first.exception() is None
    assert spark.read.parquet(str(out)).count() == 30

    produce(b, [{"topic": "lossy", "value": f"v{i}".encode()} for i in range(30, 100)])
    admin = AdminClient({"bootstrap.servers": b})
    for f in admin.delete_records([TopicPartition("lossy", 0, 60)]).values():
        assert f.result(timeout=30).low_watermark == 60
    # Offsets 30..59 are gone; the checkpoint says the query resumes at 30. A copy for the second way.
    for name in ("out", "ck"):
        shutil.copytree(tmp_path / name, tmp_path / f"{name}2")

    failed = _run_until_done(spark, b, "lossy", out, ck)
    error = failed.exception()
    assert error is not None
    text = str(error)
    assert "Offsets [30, 60) of lossy-0 are gone" in text and "failOnDataLoss" in text
    assert spark.read.parquet(str(out)).count() == 30  # nothing was committed past the loss

    skipped = _run_until_done(spark, b, "lossy", tmp_path / "out2", tmp_path / "ck2", failOnDataLoss="false")
    assert skipped.exception() is None
    # (the copied sink log names the files of out/, so read the copy's files themselves)
    got = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out2" / "*.parquet")).collect())
    assert got == list(range(30)) + list(range(60, 100))  # resumed at 30, skipped to the log start 60


def test_write_dataframe_then_read_with_plain_client(spark: Any, module_broker: Any) -> None:
    b = module_broker.bootstrap
    create_topic(b, "written", 3)
    rows = [(f"k{i}", f"value-{i}".encode(), i % 3, [(f"h{i}", f"x{i}".encode())] if i % 2 else None)
            for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key:string,value:binary>>")
    df.write.format("strom").mode("append").option("kafka.bootstrap.servers", b).option("topic", "written").save()
    got = consume_all(b, "written", 300)
    assert len(got) == 300
    seen = sorted((m.partition(), m.key(), m.value(), tuple(m.headers() or ())) for m in got)
    want = sorted((p, k.encode(), v, tuple(h or ())) for k, v, p, h in rows)
    assert seen == want
    for part in range(3):  # each partition holds its rows in the DataFrame's order of that partition
        offsets = sorted(m.offset() for m in got if m.partition() == part)
        assert offsets == list(range(100))

    # a topic column routes rows; string values are written as UTF-8
    create_topic(b, "routed-a", 1)
    create_topic(b, "routed-b", 1)
    routed = spark.createDataFrame([("routed-a" if i % 3 else "routed-b", f"r{i}") for i in range(30)],
                                   "topic string, value string")
    routed.write.format("strom").mode("append").option("kafka.bootstrap.servers", b).save()
    a = consume_all(b, "routed-a", 20)
    bb = consume_all(b, "routed-b", 10)
    assert sorted(m.value() for m in a) == sorted(f"r{i}".encode() for i in range(30) if i % 3)
    assert sorted(m.value() for m in bb) == sorted(f"r{i}".encode() for i in range(30) if i % 3 == 0)

    with pytest.raises(Exception, match="topic option required"):
        spark.createDataFrame([("x",)], "value string").write.format("strom").mode("append") \
            .option("kafka.bootstrap.servers", b).save()
    with pytest.raises(Exception, match="append-only"):
        routed.write.format("strom").mode("overwrite").option("kafka.bootstrap.servers", b).save()
