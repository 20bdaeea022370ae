#!/usr/bin/env python3
"""What the Spark sink's exactly-once writes cost: one streaming query (availableNow) copying a topic
to another with exactlyOnce=true and with exactlyOnce=false, alternating, same broker, same session,
after one warm-up run of each.

The broker is strom.testing's EmbeddedBroker (a real broker process on 127.0.0.1); Spark runs in
local[2]. Printed: records/s of each run (from the query's start to its end), the medians and the
ratio exactly-once / at-least-once.

    .venv/bin/python benchmarks/spark_sink_eos.py                 # 200,000 x 100 B, 4 micro-batches, 2 runs each
    .venv/bin/python benchmarks/spark_sink_eos.py --records 500000 -n 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from strom.testing import EmbeddedBroker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=2)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batches", type=int, default=4, help="micro-batches the input is cut into")
    args = ap.parse_args()
    from confluent_kafka import Producer

    from strom.spark import local_session

    spark = local_session("strom-sink-eos-bench", "local[2]", **{"spark.sql.shuffle.partitions": "2",
                                                                 "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[str, list[float]] = {"at-least-once": [], "exactly-once": []}
    with EmbeddedBroker({"num.partitions": "2"}) as broker, tempfile.TemporaryDirectory() as tmp:
        b = broker.bootstrap_servers
        broker.create_topic("in", partitions=2)
        p = Producer({"bootstrap.servers": b, "linger.ms": 20})
        value = os.urandom(args.size)
        for i in range(args.records):
            while True:
                try:
                    p.produce("in", value, key=str(i).encode())
                    break
                except BufferError:
                    p.poll(0.01)
        p.flush(60)
        for run in range(-1, args.runs):  # run -1 warms Spark's JVM and Python workers up: not counted
            for mode in ("at-least-once", "exactly-once"):
                out = f"out-{mode}-{run}"
                broker.create_topic(out, partitions=2)
                q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", b)
                     .option("subscribe", "in").option("startingOffsets", "earliest")
                     .option("maxOffsetsPerTrigger", str(args.records // args.batches)).load()
                     .select("key", "value")
                     .writeStream.format("strom").option("kafka.bootstrap.servers", b).option("topic", out)
                     .option("exactlyOnce", str(mode == "exactly-once").lower())
                     .option("checkpointLocation", f"{tmp}/{out}").trigger(availableNow=True).start())
                start = time.perf_counter()
                q.awaitTermination()
                rate = args.records / (time.perf_counter() - start)
                if run >= 0:
                    results[mode].append(rate)
                print(f"run {run + 1} {mode:14s} {rate:10,.0f} records/s{' (warm-up)' if run < 0 else ''}", flush=True)
    spark.stop()
    alo, eo = (statistics.median(results[k]) for k in ("at-least-once", "exactly-once"))
    print(f"median: at-least-once {alo:,.0f} records/s, exactly-once {eo:,.0f} records/s, ratio {eo / alo:.2f}; "
          f"{args.records // args.batches:,} records per micro-batch; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
