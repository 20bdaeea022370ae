"""The broker's client quotas: what each response costs its client (bytes produced, bytes fetched,
request-handling time), measured per quota entity, and how long the client must wait
(throttle_time_ms in the response, and its connection left unread that long: KIP-219). Quotas
come from the quota store and change through AlterClientQuotas."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from strom.broker.reloader import Reloader
from strom.security.quota_store import Change, QuotaStore, ZkQuotaStore
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaBucket,
    QuotaEntity,
    resolve,
)

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.config import BrokerConfig

log = logging.getLogger("strom.quotas")

PRODUCE, FETCH = 0, 1
SWEEP_EVERY_S = 60.0  # how often buckets of idle clients are dropped (each client id may have its own)


class QuotaManager:
    """``config``: the static settings (quota.window.num, quota.window.size.seconds); ``store``: where
    the quotas are kept (a file on one broker, ZooKeeper in a cluster); ``spawn`` runs the reloads a
    store's watch asks for."""

    def __init__(self, config: BrokerConfig, store: QuotaStore,
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]]) -> None:
        cfg = config
        self.samples = int(str(cfg.get("quota.window.num")))
        self.window_s = float(str(cfg.get("quota.window.size.seconds")))
        # A client may send this many seconds of its quota at once (Kafka measures a first burst over
        # quota.window.num - 1 windows); a throttle is never longer than the whole window.
        self.burst_s = max(1, self.samples - 1) * self.window_s
        self.max_throttle_ms = self.samples * self.window_s * 1000
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._buckets: dict[tuple[str, QuotaEntity], QuotaBucket] = {}
        self._next_sweep = 0.0
        self.store = store
        self._reloader = Reloader("client quotas", self.store.load, self._apply, spawn)

    @property
    def active(self) -> bool:
        return bool(self.quotas)

    async def start(self) -> None:
        await self._reloader.reload()
        if isinstance(self.store, ZkQuotaStore):
            await asyncio.get_running_loop().run_in_executor(None, self.store.watch, self._reloader.on_change())
        if self.quotas:
            log.info("client quotas: %d entities", len(self.quotas))

    def _apply(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        self.quotas = quotas

    async def alter(self, changes: Iterable[Change]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store.alter, list(changes))
        await self._reloader.reload()

    # ---- the cost of one response ----------------------------------------------------------------

    def throttle(self, ctx: RequestContext, response_bytes: int, handler_s: float, now: float) -> int:
        """Milliseconds the client must wait after this response (0: none), having recorded its cost
        against every quota that applies to it."""
        user = ctx.principal.partition(":")[2]
        client_id = ctx.client_id or ""
        delay = 0
        if ctx.api_key == PRODUCE:
            delay = self._record(PRODUCER_BYTE_RATE, user, client_id, ctx.size, 1.0, now)
        elif ctx.api_key == FETCH:
            delay = self._record(CONSUMER_BYTE_RATE, user, client_id, response_bytes, 1.0, now)
        # request_percentage: the share of one handler thread, as milliseconds per second / 10.
        return max(delay, self._record(REQUEST_PERCENTAGE, user, client_id, handler_s * 1000, 10.0, now))

    def _sweep(self, now: float) -> None:
        """Drop the buckets that have filled up again: a new one would be the same."""
        self._next_sweep = now + SWEEP_EVERY_S
        for k in [k for k, b in self._buckets.items() if b.full_at() <= now]:
            del self._buckets[k]

    def fetch_cap(self, ctx: RequestContext) -> int | None:
        """The most a consumer under a byte-rate quota may be sent in one Fetch: one window of its
        quota, as Kafka caps it (a larger answer would only be throttled away)."""
        found = resolve(self.quotas, ctx.principal.partition(":")[2], ctx.client_id or "", CONSUMER_BYTE_RATE)
        return None if found is None else max(1, int(found[1] * self.window_s))

    def _record(self, key: str, user: str, client_id: str, value: float, unit: float, now: float) -> int:
        found = resolve(self.quotas, user, client_id, key)
        if found is None:
            return 0
        entity, bound = found
        rate = bound * unit
        if now >= self._next_sweep:
            self._sweep(now)
        bucket = self._buckets.get((key, entity))
        if bucket is None or bucket.rate != rate:  # new, or its quota changed
            bucket = self._buckets[(key, entity)] = QuotaBucket(rate, rate * self.burst_s, now)
        return int(min(bucket.take(value, now) * 1000, self.max_throttle_ms))
