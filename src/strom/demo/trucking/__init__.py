"""The streaming trucking example, in the spirit of Kafka's classic demo.

A simulator produces truck geo-location events to `truck-geo-events`, in Avro with confluent-kafka's
AvroSerializer against the broker's schema registry (subject `truck-geo-events-value`); a Spark
Structured Streaming job reads them with the strom source, decodes them with
strom.spark.from_avro, computes per-driver violation counts and average
speed in event-time windows with a watermark, writes alerts for risky drivers to `truck-alerts`
(strom sink) and the windowed aggregates to a Parquet table.
"""

EVENTS_TOPIC = "truck-geo-events"
ALERTS_TOPIC = "truck-alerts"
EVENTS_SUBJECT = EVENTS_TOPIC + "-value"  # the serializer's default subject (TopicNameStrategy)
