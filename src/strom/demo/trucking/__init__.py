"""The streaming trucking example, in the spirit of Kafka's classic demo.

A simulator produces truck geo-location events (JSON) to `truck-geo-events`; a Spark Structured
Streaming job reads them with the strom source, computes per-driver violation counts and average
speed in event-time windows with a watermark, writes alerts for risky drivers to `truck-alerts`
(strom sink) and the windowed aggregates to a Parquet table.
"""

EVENTS_TOPIC = "truck-geo-events"
ALERTS_TOPIC = "truck-alerts"
