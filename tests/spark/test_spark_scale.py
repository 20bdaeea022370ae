"""The source at scale: 3,000,000 records in 4 partitions, read by one batch query (its ranges split
into more tasks than partitions), arrive each exactly once: no gap, no duplicate, nothing past the end."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

RECORDS = 3_000_000
PARTITIONS = 4

pytestmark = pytest.mark.timeout(300)


def _fill(bootstrap: str, topic: str) -> None:
    """strom's own producer benchmark fills the topic: about ten times faster than a test loop."""
    subprocess.run([sys.executable, "-m", "strom.cli.main", "bench", "produce", "-b", bootstrap, "--topic", topic,
                    "--records", str(RECORDS), "--record-size", "16", "--partitions", str(PARTITIONS),
                    "--acks", "1", "--json"], check=True, capture_output=True, timeout=240)


def _log_ends(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-check"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)}
    finally:
        c.close()


def test_three_million_records_each_once(spark: Any, module_broker: Any) -> None:
    from pyspark.sql import functions as F

    b, topic = module_broker.bootstrap, "scale"
    _fill(b, topic)
    ends = _log_ends(b, topic)
    assert sum(high - low for low, high in ends.values()) == RECORDS
    assert all(high > 0 for _, high in ends.values()), ends  # every partition has records

    df = (spark.read.format("strom").option("kafka.bootstrap.servers", b).option("subscribe", topic)
          .option("minPartitions", "10").load())
    # Per partition: how many rows, the first and last offset, and the sums of the offsets and of their
    # squares. Rows all inside [low, high) as many as the log holds, with both sums those of
    # low..high-1, leave no room for a duplicate or a gap (an exact countDistinct would shuffle every
    # offset and cost far more than the read).
    rows = (df.groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("first"), F.max("offset").alias("last"),
                 F.sum("offset").alias("sum"), F.sum(F.col("offset") * F.col("offset")).alias("squares"),
                 F.sum(F.length("value")).alias("bytes"), F.max("topic").alias("topic"))
            .collect())
    got = {r.partition: r for r in rows}
    assert sorted(got) == list(range(PARTITIONS))
    for p, (low, high) in ends.items():
        r = got[p]
        offsets = range(low, high)
        assert (r.n, r.first, r.last) == (len(offsets), low, high - 1), (p, r, low, high)
        assert (r.sum, r.squares) == (sum(offsets), sum(o * o for o in offsets)), (p, r)
        assert r.bytes == 16 * len(offsets)
        assert r.topic == topic
