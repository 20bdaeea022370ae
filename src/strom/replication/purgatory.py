"""Delayed operations waiting on partitions (Kafka's purgatories): a fetch's long poll, an
acks=all produce waiting for the ISR, a DeleteRecords waiting for the replicas' log starts.

A waiter registers for a set of partition keys and is woken as soon as any of them changes (an
append, a high watermark step, a leadership or ISR change), so a long-polling consumer sees new
data within milliseconds instead of at the end of fetch.max.wait.ms.

A fetch that names many partitions waits by topic instead (``wait_topics``): registering costs one
entry per topic, not per partition, and the wait learns which partitions were notified, so that a
wake-up looks only at those. ``since`` (a ``seq`` read when the fetch last looked) closes the gap
between a look and the registration that follows it a loop turn later: the last notifications are
kept (a bounded log) and replayed into the waiter; the latest notification of each topic is kept
too, so that a wait whose topics saw nothing since looks no further, however busy other topics were.
Persistent listeners (fetch sessions, which track what changed between requests) are told of every
notification.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Iterable

PartitionKey = tuple[str, int]
# How many of the latest notifications are kept for ``changed_since``.
RECENT = 4096
# How many topics' latest notifications are kept for ``topics_changed_since``.
TOPICS_KEPT = 100_000


class TopicWaiter:
    """One wait on whole topics: ``changed`` collects the partitions notified."""

    __slots__ = ("changed", "fut")

    def __init__(self, fut: asyncio.Future[None], changed: set[PartitionKey]) -> None:
        self.fut = fut
        self.changed = changed


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self._topic_waiters: dict[str, set[TopicWaiter]] = {}
        # Told every notified key, synchronously (fetch sessions mark their partitions with it).
        self.listeners: list[Callable[[PartitionKey], None]] = []
        self.seq = 0  # notifications so far
        self._recent: deque[PartitionKey] = deque(maxlen=RECENT)
        self._topic_seq: dict[str, int] = {}  # topic -> ``seq`` of its latest notification
        self._topic_seq_floor = 0  # what a topic not in _topic_seq may have seen (it is emptied when large)

    async def wait(self, keys: Iterable[PartitionKey], timeout: float) -> bool:
        """Wait until one of ``keys`` is notified or ``timeout`` passes; True if woken."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        keys = list(keys)
        for k in keys:
            self._watchers.setdefault(k, set()).add(fut)
        handle = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            for k in keys:
                s = self._watchers.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._watchers[k]
        return fut.result() is not None if not fut.cancelled() else False

    def changed_since(self, seq: int) -> list[PartitionKey] | None:
        """The keys notified after ``seq`` (an earlier ``self.seq``), or None when more were
        notified than are kept."""
        n = self.seq - seq
        if n <= 0:
            return []
        if n > len(self._recent):
            return None
        return list(itertools.islice(self._recent, len(self._recent) - n, None))

    def topics_changed_since(self, topics: Iterable[str], seq: int) -> bool:
        """Whether a partition of one of ``topics`` was notified after ``seq`` (one look per topic)."""
        if self.seq == seq:
            return False
        latest, floor = self._topic_seq, self._topic_seq_floor
        return any(latest.get(t, floor) > seq for t in topics)

    async def wait_topics(self, topics: Iterable[str], timeout: float, since: int) -> set[PartitionKey] | None:
        """Wait until a partition of one of ``topics`` is notified or ``timeout`` passes; the
        partitions of those topics notified after ``since`` (empty when the time ran out), or
        None at once when more were notified since then than are kept (any may have changed)."""
        topics = set(topics)
        if self.topics_changed_since(topics, since):
            missed = self.changed_since(since)
            if missed is None:
                return None
            changed = {key for key in missed if key[0] in topics}
            if changed:
                return changed
        else:
            changed = set()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiter = TopicWaiter(fut, changed)
        for t in topics:
            self._topic_waiters.setdefault(t, set()).add(waiter)
        handle = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            for t in topics:
                s = self._topic_waiters.get(t)
                if s is not None:
                    s.discard(waiter)
                    if not s:
                        del self._topic_waiters[t]
        return changed

    def notify(self, key: PartitionKey) -> None:
        self.seq += 1
        self._recent.append(key)
        latest = self._topic_seq
        if len(latest) >= TOPICS_KEPT and key[0] not in latest:
            latest.clear()  # bounded under topic churn: every topic counts as notified now
            self._topic_seq_floor = self.seq
        latest[key[0]] = self.seq
        for listener in self.listeners:
            listener(key)
        s = self._watchers.get(key)
        if s:
            for fut in s:
                if not fut.done():
                    fut.set_result(True)  # type: ignore[arg-type]
        waiters = self._topic_waiters.get(key[0])
        if waiters:
            for w in waiters:
                w.changed.add(key)
                if not w.fut.done():
                    w.fut.set_result(True)  # type: ignore[arg-type]

    def waiting(self) -> int:
        return sum(len(s) for s in self._watchers.values()) + len(
            {id(w) for s in self._topic_waiters.values() for w in s})


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
