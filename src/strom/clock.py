"""The wall clock in milliseconds, Kafka's time unit (``Time.SYSTEM.milliseconds()``): one function for
every layer (a leaf module: it imports nothing from strom, so any layer may import it)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
