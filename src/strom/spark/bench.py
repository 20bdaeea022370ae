"""Measure the strom Spark source and sink against the raw client, in one run.

    python -m strom.spark.bench --bootstrap-server 127.0.0.1:9092 [--records 1000000] [--sizes 100,1024]

For each value size, on a fresh 2-partition topic:
1. `strom bench produce` fills it (the producer's rate: the sink's yardstick),
2. `strom bench consume` reads it all (the raw client ceiling: one batch-consuming confluent-kafka
   consumer, fetch pipeline kept full),
3. the executor's work alone: both partitions read into Arrow batches in this process, one after
   the other, by each reader: the direct one (strom.spark.direct: Fetch decoded by compiled code)
   and the consumer one (strom.spark.fetch: confluent-kafka),
4. Spark local[2]: spark.read.format("strom") ... write.format("noop"), with each reader,
5. Spark local[2]: the same through readStream with trigger availableNow (one micro-batch; the
   reader auto picks, the direct one where numba is installed): from start() to the end, and the
   micro-batch alone (Spark's triggerExecution time; the rest is the query's start-up, mostly a new
   Python process for the source's planner importing pyspark from its zip, about 2 s here),
6. the sink: a cached DataFrame of as many records of that size written with format("strom"),
   then `strom bench produce` once more, so that drift on a shared machine hits both.
Steps 2-5 run --repeat times, alternating. Prints records/s for each step, then the best of each and
the ratios that matter (Spark / ceiling, sink / produce), and the CPU time each reading path spent
per record (median; the client's process for the ceiling, this process for the executor, this
process with Spark's JVM and Python workers for Spark; the broker's is not counted). Absolute rates
move with the machine's load; the ratios, measured side by side, and the CPU per record less so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.spark.options import source_options
from strom.spark.planning import OffsetRange


def _strom_bench(command: str, bootstrap: str, topic: str, records: int, size: int,
                 cpu: list[float] | None = None) -> float:
    """Run `strom bench <command>` as its own process; its records/s."""
    args = [sys.executable, "-m", "strom.cli.main", "bench", command, "-b", bootstrap, "--topic", topic,
            "--records", str(records), "--json"]
    if command == "produce":
        args += ["--record-size", str(size), "--partitions", "2"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"strom bench {command} failed: {out.stderr or out.stdout}")
    result = json.loads(out.stdout)
    received = result["records"]["received"]
    if command == "consume" and received < records:
        raise RuntimeError(f"strom bench consume read {received} of {records} records")
    if cpu is not None and result.get("client_cpu_s") is not None:
        cpu.append(float(result["client_cpu_s"]) * 1e6 / records)
    return float(result["records_per_s"])


def _ends(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"strom-spark-bench-{uuid.uuid4()}"})
    try:
        return [(p, int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])) for p in (0, 1)]
    finally:
        c.close()


def _tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds used so far by a process and all its descendants (Linux /proc; 0 elsewhere): this
    process, Spark's JVM and its Python workers. Reaped children count through cutime/cstime."""
    pid = pid or os.getpid()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    total = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    children: list[str] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):  # children of every thread: the JVM forks from others
            children += Path(f"/proc/{pid}/task/{task}/children").read_text().split()
    return total + sum(_tree_cpu_s(int(c)) for c in children)


def _timed(fn: Callable[[], int], cpu: list[float] | None = None) -> float:
    """records/s of fn(); appends the CPU microseconds per record of this process tree to ``cpu``."""
    c0, t0 = _tree_cpu_s(), time.perf_counter()
    n = fn()
    rate = n / (time.perf_counter() - t0)
    if cpu is not None:
        cpu.append((_tree_cpu_s() - c0) * 1e6 / n)
    return rate


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per value size")
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-topics", action="store_true", help="do not delete the topics at the end")
    args = ap.parse_args(argv)
    b = args.bootstrap_server
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    run_id = uuid.uuid4().hex[:8]

    from strom.spark import local_session

    spark = local_session("strom-spark-bench", "local[2]", **{"spark.ui.showConsoleProgress": "false",
                                                                "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    topics: list[str] = []
    summary: list[str] = []
    try:
        for size in sizes:
            topic = f"strom-spark-bench-{run_id}-{size}"
            topics += [topic, f"{topic}-sink", f"{topic}-produce"]
            summary += _measure(spark, b, topic, size, args.records, args.repeat)
    finally:
        spark.stop()
        if topics and not args.keep_topics:
            _delete_topics(b, topics)
    print()
    print("\n".join(summary))


def _show(name: str, rate: float) -> float:
    print(f"  {name:<52} {rate:>12,.0f} records/s", flush=True)
    return rate


def _measure(spark: Any, b: str, topic: str, size: int, records: int, repeat: int) -> list[str]:
    """Steps 1-6 for one value size; the summary lines."""
    from pyspark.sql import functions as F

    from strom.spark import direct, fetch

    out_topic = f"{topic}-sink"
    print(f"{records:,} records of {size} B", flush=True)
    produce = [_show("strom bench produce", _strom_bench("produce", b, topic, records, size))]
    ends = _ends(b, topic)
    total = sum(e for _, e in ends)
    opts = source_options({"kafka.bootstrap.servers": b, "subscribe": topic}, streaming=False)
    ranges = [OffsetRange(topic, p, 0, e) for p, e in ends]

    def executor() -> int:
        return sum(batch.num_rows for r in ranges for batch in fetch.read_range(opts, r))

    def executor_direct() -> int:
        return sum(batch.num_rows for r in ranges for batch in direct.read_range(opts, r))

    def spark_read(reader: str = "consumer") -> int:
        df = (spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", topic)
              .option("reader", reader).load())
        df.write.format("noop").mode("overwrite").save()
        return total

    def spark_stream() -> int:
        with tempfile.TemporaryDirectory(prefix="strom-spark-bench-") as ck:
            q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", b)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", ck)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            batches = [p for p in q.recentProgress if p["numInputRows"]]
            rows = sum(p["numInputRows"] for p in batches)
        if rows != total:
            raise RuntimeError(f"the streaming query read {rows} of {total} records")
        # Spark's own rate of the micro-batch (its processedRowsPerSecond): the query's start-up,
        # a fresh Python process for the source's planner that imports pyspark from its zip, is not in it.
        micro_batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
        rates["stream_batch"].append(total / micro_batch_s)  # shown after the query's own line
        return total

    spark_read()  # warm-up: the JVM's code and the Python workers
    if direct.numba_usable():
        spark_read("direct")  # ... and the compiled decoder (numba's cache, compiled once if empty)
        executor_direct()
    rates: dict[str, list[float]] = {k: [] for k in ("ceiling", "executor", "direct", "read", "read_direct",
                                                     "stream", "stream_batch")}
    cpu: dict[str, list[float]] = {k: [] for k in rates}
    for _ in range(repeat):
        rates["ceiling"].append(_show("raw client: strom bench consume", _strom_bench("consume", b, topic, total,
                                                                                      size, cpu["ceiling"])))
        rates["executor"].append(_show("executor work alone, consumer reader: -> Arrow",
                                       _timed(executor, cpu["executor"])))
        rates["read"].append(_show("Spark local[2]: read -> noop, consumer reader", _timed(spark_read, cpu["read"])))
        if direct.numba_usable():
            rates["direct"].append(_show("executor work alone, direct reader: -> Arrow",
                                         _timed(executor_direct, cpu["direct"])))
            rates["read_direct"].append(_show("Spark local[2]: read -> noop, direct reader",
                                              _timed(lambda: spark_read("direct"), cpu["read_direct"])))
        rates["stream"].append(_show("Spark local[2]: readStream availableNow -> noop",
                                     _timed(spark_stream, cpu["stream"])))
        _show("  its micro-batch alone (triggerExecution)", rates["stream_batch"][-1])

    data = (spark.range(total, numPartitions=2)
            .select(F.col("id").cast("string").cast("binary").alias("key"),
                    F.expr(f"CAST(repeat('x', {size}) AS BINARY)").alias("value"))
            .cache())
    data.count()

    def sink() -> int:
        (data.write.format("strom").mode("append").option("kafka.bootstrap.servers", b)
         .option("topic", out_topic).save())
        return total

    sink_rates: list[float] = []
    for _ in range(repeat):
        sink_rates.append(_show("Spark local[2]: DataFrame -> write.format(strom)", _timed(sink)))
        produce.append(_show("strom bench produce", _strom_bench("produce", b, f"{topic}-produce",
                                                                records, size)))
    data.unpersist()

    best = {k: max(v) for k, v in rates.items() if v}
    ceiling = best["ceiling"]

    def ratios(name: str) -> str:
        if not rates[name]:
            return "not measured (numba is not installed)"
        per_round = [r / c for r, c in zip(rates[name], rates["ceiling"], strict=True)]
        return (f"{best[name]:>12,.0f} records/s  best/best {best[name] / ceiling:.2f}x, "
                f"per round {statistics.median(per_round):.2f}x median; {cpu_text(name)}")

    def cpu_text(name: str) -> str:
        return f"CPU {statistics.median(cpu[name]):.2f} us/record" if cpu[name] else "CPU not measured"

    return [
        f"{size} B values, {total:,} records, best of {repeat}:",
        f"  raw client ceiling (strom bench consume)        {ceiling:>12,.0f} records/s  {cpu_text('ceiling')}",
        f"  executor alone, direct reader (one process)     {ratios('direct')}",
        f"  executor alone, consumer reader (one process)   {ratios('executor')}",
        f"  Spark local[2] read -> noop, direct reader      {ratios('read_direct')}",
        f"  Spark local[2] read -> noop, consumer reader    {ratios('read')}",
        f"  Spark local[2] readStream availableNow -> noop  {ratios('stream')} (reader auto)",
        f"    its micro-batch alone (Spark's triggerExecution) {ratios('stream_batch')}",
        f"  strom bench produce                             {max(produce):>12,.0f} records/s",
        f"  Spark local[2] sink                             {max(sink_rates):>12,.0f} records/s  "
        f"{max(sink_rates) / max(produce):.2f}x of strom bench produce",
    ]


def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin: Any = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for f in admin.delete_topics(doomed).values():
            f.result(30)


if __name__ == "__main__":
    main()
