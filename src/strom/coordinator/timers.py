"""Keyed deadlines for the coordinator state machine: no clock, no tasks, just data.

Scheduling a key again replaces its deadline (Kafka's "complete and schedule next expiration").
The runtime asks for ``next_deadline()`` and calls the state machine's ``tick(now)``, which pops
what has expired.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable


class TimerQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int]] = {}  # key -> (deadline, seq) of its live entry
        self._seq = itertools.count()

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        seq = next(self._seq)
        self._live[key] = (deadline_ms, seq)
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return entry[0] if entry else None

    def _drop_stale(self) -> None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            if self._live.get(key) == (deadline, seq):
                return
            heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self, now_ms: int) -> Hashable | None:
        """The earliest key whose deadline is <= now (removed), or None."""
        self._drop_stale()
        if self._heap and self._heap[0][0] <= now_ms:
            _, _, key = heapq.heappop(self._heap)
            del self._live[key]
            return key
        return None

    def __len__(self) -> int:
        return len(self._live)
