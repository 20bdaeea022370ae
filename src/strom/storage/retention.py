"""Which old segments retention deletes (Kafka's UnifiedLog.deleteOldSegments rules).

Three passes, each taking segments from the oldest while its rule holds: the segment lies wholly
below the log start offset; its newest record is older than retention.ms; the log stays at least
retention.bytes without it. Only segments wholly below the high watermark qualify, and never an
empty active segment. The log deletes the longest of the three prefixes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class _Segment(Protocol):
    size: int

    def largest_timestamp(self) -> int: ...


class _Config(Protocol):
    retention_ms: int
    retention_bytes: int

    @property
    def delete_enabled(self) -> bool: ...


def deletable_segments(
    segments: Sequence[_Segment],
    next_offsets: Sequence[int],
    *,
    high_watermark: int,
    log_start_offset: int,
    config: _Config,
    now_ms: int,
) -> int:
    """How many of the oldest ``segments`` to delete; ``next_offsets[i]`` is where segment i ends
    (the next segment's base offset, or the log end offset for the active one)."""
    eligible = [end <= high_watermark for end in next_offsets]
    eligible[-1] = eligible[-1] and segments[-1].size > 0

    def prefix(rule: Callable[[int], bool]) -> int:
        n = 0
        while n < len(segments) and eligible[n] and rule(n):
            n += 1
        return n

    count = prefix(lambda n: next_offsets[n] <= log_start_offset)
    if not config.delete_enabled:
        return count
    if config.retention_ms >= 0:
        count = max(count, prefix(lambda n: now_ms - segments[n].largest_timestamp() > config.retention_ms))
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments) - config.retention_bytes
        n = 0
        while n < len(segments) and eligible[n] and excess - segments[n].size >= 0:
            excess -= segments[n].size
            n += 1
        count = max(count, n)
    return count
