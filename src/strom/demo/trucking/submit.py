"""The trucking job alone, for `spark-submit` (the session comes from spark-submit's settings):

    spark-submit --master spark://HOST:7077 [--archives env.tar.gz#env ...] \\
        "$(python -c 'import strom.demo.trucking.submit as m; print(m.__file__)')" \\
        --bootstrap-server b1:9092,b2:9092,b3:9092 --registry http://b1:8081 --output /shared/trucking

Reads truck-geo-events, writes alerts to truck-alerts and the windows to <output>/driver_stats,
checkpoints in <output>/checkpoints (on a cluster, storage every executor and the driver share).
Runs until stopped, for --duration seconds, or with --available-now until what the topic holds at
the start is processed. The events come from `strom demo trucking` or any producer of the same
Avro records (simulator.EVENT_SCHEMA, registered under truck-geo-events-value; registered here too,
so the job can start before the first event).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap-server", required=True, help="strom (or Kafka) brokers, HOST:PORT,...")
    parser.add_argument("--registry", default="http://127.0.0.1:8081", help="the schema registry's URL")
    parser.add_argument("--output", required=True, type=Path, help="Parquet table and checkpoints")
    parser.add_argument("--trigger", default="5 seconds", help="micro-batch interval (default: 5 seconds)")
    parser.add_argument("--starting-offsets", default="latest", choices=["earliest", "latest"],
                        help="where a new query starts reading truck-geo-events")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds to run; 0: until stopped")
    parser.add_argument("--available-now", action="store_true",
                        help="process what the topic holds now (Trigger.AvailableNow), then exit")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from strom.demo.trucking import job
    from strom.demo.trucking.simulator import register_event_schema
    from strom.spark import register

    spark = SparkSession.builder.appName("strom-trucking").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    register(spark)  # stops with one line if the executors' Python cannot import strom
    output = args.output
    trigger: dict[str, Any] = {"availableNow": True} if args.available_now else {"processingTime": args.trigger}
    register_event_schema(args.registry)
    queries = job.start(spark, args.bootstrap_server, output, output / "checkpoints", registry_url=args.registry,
                        trigger=trigger,
                        source_options={"startingOffsets": args.starting_offsets})
    print(f"trucking job running: alerts -> truck-alerts, windows -> {output / 'driver_stats'}", flush=True)
    deadline = time.monotonic() + args.duration if args.duration else None
    try:
        while deadline is None or time.monotonic() < deadline:
            for q in queries:
                if q.exception() is not None:
                    print(f"query {q.name} failed: {q.exception()}", file=sys.stderr)
                    return 1
            if not any(q.isActive for q in queries):
                break  # available-now: both queries are done
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        for q in queries:
            q.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
