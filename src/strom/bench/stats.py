"""Latency samples and their percentiles (nearest rank, like kafka-producer-perf-test)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable

from strom.bench.result import LatencySummary

PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99_9", 99.9))


class LatencyRecorder:
    """Every latency sample of a run, in milliseconds, kept in a compact array (8 bytes each)."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples = array("d")

    def add(self, ms: float) -> None:
        self.samples.append(ms)

    def extend(self, values: Iterable[float]) -> None:
        self.samples.extend(values)

    def __len__(self) -> int:
        return len(self.samples)

    def summary(self) -> LatencySummary | None:
        return summarize(self.samples)


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (never interpolates: it is a value that was seen)."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(round(pct * len(sorted_values) / 100.0, 9)))  # round: 99.9% of 1000 is 999
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize(samples: Iterable[float]) -> LatencySummary | None:
    values = sorted(samples)
    if not values:
        return None
    pcts = {name: percentile(values, pct) for name, pct in PERCENTILES}
    return LatencySummary(
        count=len(values),
        mean=math.fsum(values) / len(values),
        min=values[0],
        p50=pcts["p50"],
        p95=pcts["p95"],
        p99=pcts["p99"],
        p99_9=pcts["p99_9"],
        max=values[-1],
    )
