"""Offset-range planning, pure functions: how much a micro-batch admits and how ranges become tasks.

These follow Spark's Kafka source (KafkaMicroBatchStream.rateLimit, KafkaOffsetRangeCalculator)
so that a query moved from Spark's connector to strom's plans the same micro-batches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from strom.spark.options import PartitionOffsets, TopicPartition


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [from_offset, until_offset) of one topic partition: one Spark task reads one range."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """Admit at most `limit` records, shared among partitions in proportion to their backlog.

    A partition with a backlog gets at least one record (small partitions are not starved), so the
    total can exceed `limit` by at most the number of partitions whose share is below one record.
    `start` must hold every partition of `latest` (new partitions at their earliest offset).
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def _divide(parts: int, r: OffsetRange) -> list[OffsetRange]:
    remaining = r.size
    start = r.from_offset
    out = []
    for part in range(parts):
        this = remaining // (parts - part)  # the last piece takes the rounding
        remaining -= this
        end = min(start + this, r.until_offset)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """One task per non-empty range, or more: at most `max_records_per_partition` records per task,
    and at least `min_partitions` tasks by splitting the large ranges (Spark's minPartitions)."""
    ranges = [r for r in ranges if r.size > 0]
    if (min_partitions is None or len(ranges) >= min_partitions) and max_records_per_partition is None:
        return ranges
    if max_records_per_partition is not None:
        ranges = [piece for r in ranges
                  for piece in _divide(math.ceil(r.size / max_records_per_partition), r)]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    unsplit = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
    unsplit_tps = {r.topic_partition for r in unsplit}
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r.topic_partition in unsplit_tps else _part_count(r.size, split_total, split_min)
        out.extend(_divide(parts, r))
    return out
