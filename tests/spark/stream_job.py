"""A streaming query run as its own Spark driver process (killed and restarted by test_spark_restart.py).

    python stream_job.py BOOTSTRAP TOPIC OUT CHECKPOINT (continuous|available-now) MAX_OFFSETS_PER_TRIGGER [MASTER]

Reads TOPIC from the earliest offset with the strom source and appends (partition, offset, value) to
a Parquet file sink at OUT, or, when OUT is `topic:NAME`, writes each record to topic NAME with the
strom sink (key "partition:offset", the value; exactly-once, the sink's default for a stream). `continuous` runs micro-batches until killed; `available-now` finishes
what is there and exits 0. MASTER is local[2] by default, or a standalone cluster's spark://HOST:PORT
(then two executors of one core each, small and quick to start).
"""

from __future__ import annotations

import sys


def main() -> int:
    bootstrap, topic, out, checkpoint, mode, max_per_trigger = sys.argv[1:7]
    master = sys.argv[7] if len(sys.argv) > 7 else "local[2]"
    from strom.spark import local_session

    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.faulthandler.enabled": "true",  # a crashed Python worker shows its stack
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
    if master.startswith("spark://"):
        conf.update({"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "512m",
                     "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                     "spark.locality.wait": "0s"})  # no waiting for a preferred executor: tasks spread at once
    spark = local_session("strom-stream-job", master, **conf)
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", max_per_trigger)
          .load()
          .select("partition", "offset", "value"))
    if out.startswith("topic:"):
        from pyspark.sql import functions as F

        rows = df.select(F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"))
                         .alias("key"), "value")
        writer = (rows.writeStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", out.removeprefix("topic:")).option("checkpointLocation", checkpoint)
                  .queryName("strom_restart_job"))
    else:
        writer = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                  .queryName("strom_restart_job"))
    writer = writer.trigger(availableNow=True) if mode == "available-now" else writer.trigger(processingTime="0 seconds")
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
