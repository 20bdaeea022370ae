"""Retention rules on plain values: which oldest segments go."""

from __future__ import annotations

from dataclasses import dataclass

from strom.storage.log import LogConfig
from strom.storage.retention import deletable_segments


@dataclass
class Seg:
    size: int
    ts: int

    def largest_timestamp(self) -> int:
        return self.ts


SEGS = [Seg(100, 1_000), Seg(100, 2_000), Seg(100, 3_000), Seg(50, 4_000)]
ENDS = [10, 20, 30, 35]


def count(
    config: LogConfig, *, hw: int = 35, start: int = 0, now: int = 4_500, segs: list[Seg] = SEGS
) -> int:
    return deletable_segments(
        segs, ENDS, high_watermark=hw, log_start_offset=start, config=config, now_ms=now
    )


def test_time_retention_takes_expired_prefix() -> None:
    assert count(LogConfig(retention_ms=2_000)) == 2  # newest records at 1000 and 2000 are > 2 s old
    assert count(LogConfig(retention_ms=100_000)) == 0
    assert count(LogConfig(retention_ms=0)) == 4  # the active one too (the log rolls first)


def test_size_retention_keeps_at_least_retention_bytes() -> None:
    cfg = LogConfig(retention_ms=-1, retention_bytes=150)
    assert count(cfg) == 2  # 350 -> 250 -> 150; one more would leave 50
    assert count(LogConfig(retention_ms=-1, retention_bytes=0)) == 4


def test_log_start_offset_deletes_whole_segments_below_it() -> None:
    cfg = LogConfig(retention_ms=-1)
    assert count(cfg, start=20) == 2
    assert count(cfg, start=19) == 1
    assert (
        count(LogConfig(cleanup_policy="compact", retention_ms=0), start=20) == 2
    )  # compact: only this rule


def test_never_above_high_watermark_nor_an_empty_active_segment() -> None:
    assert count(LogConfig(retention_ms=0), hw=20) == 2
    empty_active = [*SEGS[:3], Seg(0, -1)]
    assert count(LogConfig(retention_ms=0), segs=empty_active) == 3
