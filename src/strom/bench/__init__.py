"""``strom bench``: producer, consumer and end-to-end benchmarks against any Kafka-compatible broker.

In the spirit of Kafka's kafka-producer-perf-test and kafka-consumer-perf-test, built on confluent-kafka
(librdkafka) so that the client is not the bottleneck. Each workload returns a :class:`BenchResult`
that prints as a summary table or as JSON; ``benchmarks/compare.py`` runs them side by side against
strom and a peer broker.
"""

from strom.bench.result import BenchResult, LatencySummary

__all__ = ["BenchResult", "LatencySummary"]
