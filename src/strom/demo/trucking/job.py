"""The trucking Structured Streaming job: events in, per-driver windowed statistics and alerts out.

    events  = strom topic truck-geo-events, Avro values decoded by from_avro with the subject's latest
              schema (values that are not Avro of a registered schema dropped)
    stats   = per driver and 1-minute event-time window (watermark 30 s): events, violations by type,
              average and maximum speed                               -> Parquet table
    alerts  = the windows of drivers with at least 3 violations        -> strom topic truck-alerts

Both outputs are in append mode: a window is written once, when the watermark has passed its end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.demo.trucking import ALERTS_TOPIC, EVENTS_SUBJECT, EVENTS_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

WINDOW_SECONDS = 60
WATERMARK_SECONDS = 30
ALERT_MIN_VIOLATIONS = 3



def read_events(spark: SparkSession, bootstrap: str, registry_url: str, source_options: dict[str, str] | None = None,
                registry_config: dict[str, str] | None = None) -> DataFrame:
    """The events as typed columns: from_avro with the subject's latest schema (PERMISSIVE: a value
    that is not Avro of a registered schema becomes null, and is dropped)."""
    from pyspark.sql import functions as F

    from strom.spark import from_avro

    reader = (spark.readStream.format("strom")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", EVENTS_TOPIC))
    for k, v in (source_options or {}).items():
        reader = reader.option(k, v)
    decoded = reader.load().select(from_avro("value", subject=EVENTS_SUBJECT, registry_url=registry_url,
                                             mode="PERMISSIVE", registry_config=registry_config).alias("e"))
    return (decoded.where(F.col("e").isNotNull()).select("e.*")
            .withColumn("eventTs", F.timestamp_millis("eventTime")))


def driver_stats(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    def count_of(event_type: str) -> Any:
        return F.sum(F.when(F.col("eventType") == event_type, 1).otherwise(0))

    return (events
            .withWatermark("eventTs", f"{WATERMARK_SECONDS} seconds")
            .groupBy(F.window("eventTs", f"{WINDOW_SECONDS} seconds").alias("window"), "driverId", "driverName")
            .agg(F.count("*").alias("events"),
                 F.sum(F.when(F.col("eventType") != "Normal", 1).otherwise(0)).alias("violations"),
                 count_of("Overspeed").alias("overspeed"),
                 count_of("Lane Departure").alias("laneDepartures"),
                 count_of("Unsafe following distance").alias("unsafeFollowing"),
                 F.avg("speed").alias("avgSpeed"),
                 F.max("speed").alias("maxSpeed"))
            .select(F.col("window.start").alias("windowStart"), F.col("window.end").alias("windowEnd"),
                    "driverId", "driverName", "events", "violations", "overspeed", "laneDepartures",
                    "unsafeFollowing", "avgSpeed", "maxSpeed"))


def alerts(stats: DataFrame) -> DataFrame:
    """(key, value) rows for truck-alerts: key = driver id, value = JSON with the window's figures."""
    from pyspark.sql import functions as F

    risky = stats.where(F.col("violations") >= ALERT_MIN_VIOLATIONS)
    return risky.select(
        F.col("driverId").cast("string").alias("key"),
        F.to_json(F.struct(
            "driverId", "driverName",
            F.unix_millis("windowStart").alias("windowStart"),
            F.unix_millis("windowEnd").alias("windowEnd"),
            "events", "violations", "overspeed", "laneDepartures", "unsafeFollowing", "avgSpeed", "maxSpeed",
        )).alias("value"))


def start(spark: SparkSession, bootstrap: str, output_dir: Path, checkpoint_dir: Path, *, registry_url: str,
          trigger: dict[str, Any] | None = None, source_options: dict[str, str] | None = None,
          sink_options: dict[str, str] | None = None,
          registry_config: dict[str, str] | None = None) -> list[StreamingQuery]:
    """Start the two queries: alerts to the strom topic, aggregates to Parquet at output_dir/driver_stats.

    The events' subject must have a schema in the registry at `registry_url` (from_avro types the
    columns with its latest version when the queries are defined): see simulator.register_event_schema.

    `trigger` is passed to DataStreamWriter.trigger (e.g. {"processingTime": "2 seconds"} or
    {"availableNow": True}); `source_options` are extra options of the strom source, `sink_options`
    of the strom sink that writes the alerts.
    """
    trigger = trigger or {"processingTime": "2 seconds"}
    stats_query = (driver_stats(read_events(spark, bootstrap, registry_url, source_options, registry_config))
                   .writeStream.format("parquet").outputMode("append")
                   .option("path", str(output_dir / "driver_stats"))
                   .option("checkpointLocation", str(checkpoint_dir / "driver_stats"))
                   .queryName("trucking_driver_stats")
                   .trigger(**trigger).start())
    alerts_query = (alerts(driver_stats(read_events(spark, bootstrap, registry_url, source_options, registry_config)))
                    .writeStream.format("strom").outputMode("append")
                    .options(**(sink_options or {}))
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", ALERTS_TOPIC)
                    .option("checkpointLocation", str(checkpoint_dir / "alerts"))
                    .queryName("trucking_alerts")
                    .trigger(**trigger).start())
    return [stats_query, alerts_query]
