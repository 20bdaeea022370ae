"""Measure the strom Spark source: Arrow record batches against row tuples, and where the time goes.

    python -m strom.spark.bench --bootstrap-server 127.0.0.1:9092 [--records 1000000] [--size 100]

Fills a 2-partition topic (unless it already holds the records), then reads all of it
1. with a bare confluent-kafka consumer (the client's ceiling: no columns, no Spark),
2. the conversion alone, from up to 200,000 records fetched into memory beforehand: records ->
   Arrow batches, and records -> tuples -> Arrow through PySpark's own converter (what Spark does
   with tuples a reader yields),
3. the executor's whole work (fetch and conversion) in this process, both ways,
4. through Spark (local[2]): spark.read.format("strom") ... write.format("noop"), arrow=true and false.
Prints records/s for each; best of --repeat runs.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

from strom.spark.options import source_options
from strom.spark.planning import OffsetRange


def _fill(bootstrap: str, topic: str, records: int, size: int) -> list[tuple[int, int]]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            f.result(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    missing = records - sum(ends)
    if missing > 0:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                             "compression.type": "none"})
        value = bytes(range(256)) * (size // 256 + 1)
        t0 = time.perf_counter()
        for i in range(missing):
            while True:
                try:
                    producer.produce(topic, value=value[:size], key=b"k%d" % (i % 1000), partition=i % 2,
                                     headers=[("h", b"1")] if i % 10 == 0 else None)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)
        print(f"produced {missing} records of {size} bytes in {time.perf_counter() - t0:.1f}s")
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    c.close()
    return [(p, ends[p]) for p in (0, 1)]


def _fetch_into_memory(bootstrap: str, topic: str, n: int) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    msgs: list[Any] = []
    while len(msgs) < n:
        msgs += [m for m in c.consume(num_messages=min(8192, n - len(msgs)), timeout=1.0) if m.error() is None]
    c.close()
    return msgs


def _best(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="spark-bench")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-spark", action="store_true")
    args = ap.parse_args(argv)
    b, topic = args.bootstrap_server, args.topic
    ends = _fill(b, topic, args.records, args.size)
    total = sum(e for _, e in ends)
    opts = source_options({"kafka.bootstrap.servers": b, "subscribe": topic}, streaming=False)
    ranges = [OffsetRange(topic, p, 0, e) for p, e in ends]
    results: list[tuple[str, float, int]] = []

    def report(name: str, seconds: float, n: int) -> None:
        results.append((name, seconds, n))
        print(f"{name:<58} {n / seconds:>12,.0f} records/s  ({n} in {seconds:.2f}s)", flush=True)

    # 1. bare client
    def bare() -> int:
        from confluent_kafka import Consumer, TopicPartition

        n = 0
        for p, end in ends:
            c = Consumer({"bootstrap.servers": b, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False})
            c.assign([TopicPartition(topic, p, 0)])
            got = 0
            while got < end:
                for m in c.consume(num_messages=min(8192, end - got), timeout=1.0):
                    if m.error() is None:
                        m.key(), m.value(), m.offset(), m.timestamp()
                        got += 1
            c.close()
            n += got
        return n

    report("confluent-kafka consumer alone (key/value/offset/ts)", *_best(args.repeat, bare))

    # 2. the conversion alone, from records already fetched into memory
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from strom.spark import fetch
    from strom.spark.source import StromDataSource, source_schema

    msgs = _fetch_into_memory(b, topic, min(ends[0][1], 200_000))
    chunks = [msgs[i:i + fetch.BATCH_ROWS] for i in range(0, len(msgs), fetch.BATCH_ROWS)]
    schema = fetch.arrow_schema(False)
    ds = StromDataSource({})

    def columns(chunk: list[Any]) -> Any:
        cols = fetch._Columns(False)
        cols.add_all(chunk)
        return cols

    def convert_arrow() -> int:
        return sum(columns(c).to_batch(schema, topic, 0).num_rows for c in chunks)

    def convert_tuples() -> int:
        rows = (row for c in chunks for row in columns(c).to_tuples(topic, 0))
        return sum(batch.num_rows for batch in records_to_arrow_batches(rows, 10_000, source_schema(False), ds))

    for _ in range(2):  # alternate, so drift on a shared machine hits both
        report("conversion only: records -> Arrow batches (strom.spark)", *_best(args.repeat, convert_arrow))
        report("conversion only: records -> tuples -> Arrow (PySpark's)", *_best(args.repeat, convert_tuples))
    msgs.clear()  # free the fetched records
    chunks.clear()

    # 3. the executor's whole work (fetch + conversion), in this process
    def arrow() -> int:
        return sum(batch.num_rows for r in ranges for batch in fetch.read_range(opts, r))

    def tuples() -> int:
        return sum(batch.num_rows for r in ranges
                   for batch in records_to_arrow_batches(fetch.read_range_tuples(opts, r), 10_000,
                                                         source_schema(False), ds))

    report("executor: fetch + records -> Arrow batches", *_best(args.repeat, arrow))
    report("executor: fetch + records -> tuples -> Arrow", *_best(args.repeat, tuples))

    # 3. through Spark
    if not args.skip_spark:
        from strom.spark import local_session

        spark = local_session("strom-spark-bench", "local[2]", **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")

        def spark_read(arrow_on: bool) -> Callable[[], int]:
            def run() -> int:
                df = (spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", topic)
                      .option("arrow", str(arrow_on).lower()).load())
                df.write.format("noop").mode("overwrite").save()
                return total
            return run

        spark_read(True)()  # warm-up: JVM and Python workers
        for _ in range(2):
            report("Spark local[2] read -> noop, Arrow batches", *_best(args.repeat, spark_read(True)))
            report("Spark local[2] read -> noop, tuples (arrow=false)", *_best(args.repeat, spark_read(False)))
        spark.stop()
    best: dict[str, float] = {}
    for name, s, n in results:
        best[name] = max(best.get(name, 0.0), n / s)
    for what, a, t in (
            ("conversion only", "conversion only: records -> Arrow batches (strom.spark)",
             "conversion only: records -> tuples -> Arrow (PySpark's)"),
            ("executor", "executor: fetch + records -> Arrow batches", "executor: fetch + records -> tuples -> Arrow"),
            ("through Spark", "Spark local[2] read -> noop, Arrow batches",
             "Spark local[2] read -> noop, tuples (arrow=false)")):
        if a in best and t in best:
            print(f"Arrow / tuples, {what}: {best[a] / best[t]:.2f}x")


if __name__ == "__main__":
    main()
