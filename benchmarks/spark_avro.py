#!/usr/bin/env python3
"""What from_avro costs in a Spark read: the same batch read of N Avro records (five fields: long,
int, double, string, boolean; about 30 B each), once without decoding (the raw key/value columns
written to the noop sink), once through an Arrow UDF that returns its input unchanged (what Spark's
Arrow UDF machinery costs by itself: the floor for any Arrow UDF), once decoded with
strom.spark.from_avro in the JVM (its default where strom's jar is on the session: a Java UDF over
Apache Avro, no Python worker), once with from_avro's Arrow UDF path (engine="arrow", its path
where the jar is not), and once decoded by the source itself (its valueAvroSubject option: the
Arrow path's decoding in the reader's own Arrow path, no Arrow UDF), alternating, in one run, same
broker, same session, after one warm-up of each. Every decoded read goes to the noop sink as typed
columns.

The broker is strom.testing's EmbeddedBroker with its schema registry on; the records are written by
confluent-kafka's AvroSerializer into a 2-partition topic; Spark runs in local[2]. Printed: records/s
of each run (query start to end), the medians, and the ratios decoded / raw round by round (the
issue's goal: at least 0.5, decoding costing at most half the read rate). Needs the jar: `make jvm`.

    .venv/bin/python benchmarks/spark_avro.py                      # 1,000,000 records, 3 runs each
    .venv/bin/python benchmarks/spark_avro.py --records 200000 -n 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

import pyarrow as pa
from pyspark.sql.functions import arrow_udf

from strom.testing import EmbeddedBroker

SCHEMA = {"type": "record", "name": "Reading", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "sensor", "type": "int"}, {"name": "value", "type": "double"},
    {"name": "site", "type": "string"}, {"name": "ok", "type": "boolean"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fill(bootstrap: str, url: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    t0 = time.perf_counter()
    for i in range(records):
        value = serialize({"id": i, "sensor": i % 1000, "value": i * 0.5, "site": f"site-{i % 100}",
                           "ok": i % 2 == 0}, ctx)
        while True:
            try:
                p.produce(topic, value, partition=i % 2)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    print(f"filled {topic}: {records:,} records in {time.perf_counter() - t0:.1f} s (AvroSerializer)", flush=True)


def same(values: pa.Array) -> pa.Array:
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--arrow-batch", type=int, default=None,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10000)")
    args = ap.parse_args()

    from strom.spark import from_avro, local_session

    conf = {"spark.ui.showConsoleProgress": "false"}
    if args.arrow_batch:
        conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(args.arrow_batch)
    spark = local_session("strom-avro-bench", "local[2]", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    url = f"http://127.0.0.1:{free_port()}"
    results: dict[str, list[float]] = {"raw": [], "identity": [], "jvm": [], "arrow": [], "source": []}
    with EmbeddedBroker({"num.partitions": "2", "schema.registry.listeners": url}) as broker:
        b = broker.bootstrap_servers
        broker.create_topic("readings", partitions=2)
        fill(b, url, "readings", args.records)
        for run in range(-1, args.runs):  # run -1 warms the JVM and the Python workers up: not counted
            for kind in results:
                reader = spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", "readings")
                if kind == "source":
                    reader = reader.option("valueAvroSubject", "readings-value").option("schema.registry.url", url)
                df = reader.load()
                if kind == "source":
                    df = df.select("value.*")
                elif kind in ("jvm", "arrow"):
                    df = df.select(from_avro("value", subject="readings-value", registry_url=url, engine=kind)
                                   .alias("r")).select("r.*")
                elif kind == "identity":
                    df = df.select(arrow_udf(same, "binary")("value").alias("value"))
                else:
                    df = df.select("key", "value")
                start = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                rate = args.records / (time.perf_counter() - start)
                if run >= 0:
                    results[kind].append(rate)
                print(f"run {run + 1} {kind:9s} {rate:12,.0f} records/s{' (warm-up)' if run < 0 else ''}", flush=True)
        # the decoded columns are right, by both engines: a count and a sum over them
        for engine in ("jvm", "arrow"):
            check = (spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", "readings")
                     .load().select(from_avro("value", subject="readings-value", registry_url=url, engine=engine)
                                    .alias("r"))
                     .selectExpr("count(*) AS n", "sum(r.id) AS ids", "sum(r.sensor) AS sensors").collect()[0])
            sensors = sum(i % 1000 for i in range(args.records))
            assert (check.n, check.ids, check.sensors) == (
                args.records, args.records * (args.records - 1) // 2, sensors), (engine, check)
    spark.stop()
    for kind in ("identity", "jvm", "arrow", "source"):
        rounds = [d / r for r, d in zip(results["raw"], results[kind], strict=True)]
        print(f"{kind:8s} / raw, round by round: " + ", ".join(f"{x:.2f}" for x in rounds)
              + f" (median {statistics.median(rounds):.2f})")
    raw, floor, jvm, arrow, source = (statistics.median(results[k])
                                      for k in ("raw", "identity", "jvm", "arrow", "source"))
    print(f"median: raw read {raw:,.0f} records/s; read + identity Arrow UDF {floor:,.0f} ({floor / raw:.2f}); "
          f"from_avro in the JVM {jvm:,.0f} ({jvm / raw:.2f}, goal >= 0.5); from_avro's Arrow UDF {arrow:,.0f} "
          f"({arrow / raw:.2f}); decoded by the source {source:,.0f} ({source / raw:.2f}); {args.records:,} records; "
          f"Arrow batches of {args.arrow_batch or 10000:,}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
