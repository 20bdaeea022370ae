"""ReplicaFetcher.stop() when the cancellation is lost (pure asyncio, no broker)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from strom.replication.fetcher import ReplicaFetcher


def _fetcher() -> ReplicaFetcher:
    config = SimpleNamespace(replica_fetch_backoff_ms=1000, replica_fetch_wait_max_ms=500,
                             replica_socket_timeout_ms=30000)
    manager: Any = SimpleNamespace(config=config, spawn=asyncio.ensure_future, broker_id=2,
                                   registration=lambda broker_id: None)
    return ReplicaFetcher(manager, leader_id=1)


def test_stop_ends_the_fetcher_even_when_a_fetch_swallows_the_cancellation() -> None:
    async def main() -> None:
        fetcher = _fetcher()
        conn = SimpleNamespace(closed=False)

        async def connect() -> None:
            pass

        def close() -> None:
            conn.closed = True

        conn.connect, conn.close = connect, close
        fetcher._connection = lambda: conn  # type: ignore[assignment,method-assign,return-value]
        fetches = 0

        async def fetch(_: Any) -> bool:
            # What asyncio.wait_for does on Python 3.11 when the read completes in the loop turn the
            # task is cancelled: it returns the result and the CancelledError is gone (once).
            nonlocal fetches
            fetches += 1
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if fetches > 1:
                    raise
            return True

        fetcher._fetch = fetch  # type: ignore[method-assign]
        fetcher.partitions[("t", 0)] = SimpleNamespace(truncated=True, delayed_until=0.0)  # type: ignore[assignment]
        fetcher.start()
        await asyncio.sleep(0.05)
        assert fetches == 1
        stopping = asyncio.ensure_future(fetcher.stop())
        done, _ = await asyncio.wait((stopping,), timeout=2)
        assert stopping in done, "stop() still waiting for a fetcher that lost its cancellation"
        assert fetcher._task is not None and fetcher._task.done()
        assert fetches == 1 and conn.closed

    asyncio.run(main())


def test_stop_wakes_an_idle_fetcher() -> None:
    async def main() -> None:
        fetcher = _fetcher()
        fetcher.start()
        await asyncio.sleep(0.01)
        await asyncio.wait_for(fetcher.stop(), 2)
        assert fetcher._task is not None and fetcher._task.done()

    asyncio.run(main())
