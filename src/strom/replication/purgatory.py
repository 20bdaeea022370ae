"""Delayed operations waiting on partitions (Kafka's purgatories): a fetch's long poll, an
acks=all produce waiting for the ISR, a DeleteRecords waiting for the replicas' log starts.

A waiter registers for a set of partition keys and is woken as soon as any of them changes (an
append, a high watermark step, a leadership or ISR change), so a long-polling consumer sees new
data within milliseconds instead of at the end of fetch.max.wait.ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, set[asyncio.Future[None]]] = {}

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

    def notify(self, key: PartitionKey) -> None:
        s = self._watchers.get(key)
        if s:
            for fut in s:
                if not fut.done():
                    fut.set_result(True)  # type: ignore[arg-type]

    def waiting(self) -> int:
        return sum(len(s) for s in self._watchers.values())


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
