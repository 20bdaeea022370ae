"""The registry's state kept in ``_schemas``: read from the topic, and changed only by appending to
it. Every write is sequenced through the topic: under one lock, the broker leading ``_schemas``
first reads the topic to its end (what any writer appended before is known, an earlier leader's
acknowledged writes included), decides the records from that state (the next id, the next version),
appends them and waits until they are committed, then reads them back. So the state is always the
topic's, replayed in offset order, and an answer is given only for a change the topic holds.

In a cluster only the leader of ``_schemas``' one partition writes: on any other broker a write
raises ``NotWriter`` naming the leader's registry, and the API forwards the request there
(strom.registry.forward). Reads catch up with the topic first (on another broker, from the
leader's log), so a broker answers every write acknowledged before the read began."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from strom.registry import errors
from strom.registry.state import RegistryState

log = logging.getLogger("strom.registry")

T = TypeVar("T")
READ_SETTLE_S = 5.0  # how long a read on a new leader waits for what earlier leaders wrote to be committed
Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


class SchemaLogError(Exception):
    """An append or a read of ``_schemas`` failed (no leader, a timeout, a full disk...);
    ``not_leader``: because this broker does not lead ``_schemas`` (any more)."""

    def __init__(self, message: str, not_leader: bool = False) -> None:
        super().__init__(message)
        self.not_leader = not_leader


class NotWriter(Exception):
    """This broker does not lead ``_schemas``: the write is for the registry at one of ``urls``
    (those of the broker leading it; none while no leader is known)."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        super().__init__(f"the write goes to {list(urls) or 'the leader of _schemas, once known'}")
        self.urls = urls


class SchemaLog(Protocol):
    """What the registry needs of the broker: its one partition of ``_schemas``."""

    async def ready(self) -> None:
        """Return once the broker serves (its logs are loaded)."""
        ...

    async def writer(self) -> tuple[str, ...] | None:
        """None when this broker leads ``_schemas`` (made first, compacted, one partition, if it
        does not exist) and appends itself; else the registry URLs of the broker leading it (none
        while no leader is known). Raises SchemaLogError."""
        ...

    async def append(self, records: Sequence[Record], timeout_s: float) -> None:
        """Append the records in one batch as the leader and wait until they are committed.
        Raises SchemaLogError (``not_leader`` when this broker does not lead the partition)."""
        ...

    async def read(self, from_offset: int, settle_s: float = 0.0, to_log_end: bool = False
                   ) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        """The committed records from ``from_offset`` up to the end (offset, key, value), and the
        offset to read from next; none while the topic does not exist. ``settle_s``: on the leader,
        wait up to that long first for every record written under earlier leaders to be committed
        (with ``to_log_end``, every record of its log: before a write decides). Raises
        SchemaLogError."""
        ...


class Store:
    def __init__(self, schema_log: SchemaLog, timeout_s: float = 30.0) -> None:
        self.log = schema_log
        self.state = RegistryState()
        self.timeout_s = timeout_s
        self._next_offset = 0
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._rounds = 0  # catch-ups begun
        self.loaded = asyncio.Event()

    @property
    def next_offset(self) -> int:
        """The offset after the last record applied."""
        return self._next_offset

    async def load(self) -> None:
        """Wait for the broker, then replay ``_schemas`` (again and again while it cannot be read:
        on a broker that does not lead it, until the leader answers)."""
        await self.log.ready()
        delay = 0.1
        while True:
            try:
                await self.catch_up()
                break
            except errors.RegistryError as e:
                log.warning("schema registry: %s; trying again", e.message)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)
        self.loaded.set()
        log.info("schema registry loaded %d subjects from _schemas (up to offset %d)",
                 len(self.state.subjects), self._next_offset)

    async def catch_up(self, settle_s: float = 0.0, to_log_end: bool = False, shared: bool = False) -> None:
        """Apply what the topic holds past what was read (another broker's writes, and ours);
        ``settle_s`` and ``to_log_end`` as SchemaLog.read has them. ``shared``: a catch-up that
        began after this call did, while this one waited for its turn, serves it too (reads that
        come together make one round trip to the leader, not one each in turn)."""
        arrived = self._rounds
        async with self._read_lock:
            if shared and self._rounds > arrived:
                return
            self._rounds += 1
            while True:
                try:
                    batch, next_offset = await self.log.read(self._next_offset, settle_s, to_log_end)
                except SchemaLogError as e:
                    raise errors.store_error(f"could not read _schemas: {e}") from None
                settle_s = 0.0
                for offset, key, value in batch:
                    if offset >= self._next_offset:
                        self.state.apply(key, value)
                if next_offset <= self._next_offset:
                    return
                self._next_offset = next_offset

    async def caught_up_to(self, offset: int, timeout_s: float) -> bool:
        """Catch up until the state covers ``offset`` (a write another broker answered); False if
        it does not within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._next_offset < offset:
            with contextlib.suppress(errors.RegistryError):
                await self.catch_up()
            if self._next_offset >= offset:
                break
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def ready_state(self) -> RegistryState:
        """The state, once loaded (a request that comes while the broker starts waits for it)."""
        if not self.loaded.is_set():
            try:
                await asyncio.wait_for(self.loaded.wait(), self.timeout_s)
            except TimeoutError:
                raise errors.timeout("the schema registry is still loading _schemas") from None
        return self.state

    async def fresh_state(self) -> RegistryState:
        """The state for a read: caught up with the topic first, so it holds every write
        acknowledged (by any broker) before the read began. While ``_schemas`` cannot be read (its
        leader is gone and no other is elected yet) it is what this broker has."""
        await self.ready_state()
        try:
            await self.catch_up(READ_SETTLE_S, shared=True)
        except errors.RegistryError as e:
            log.debug("schema registry: answering from the state read so far: %s", e.message)
        return self.state

    async def write(self, decide: Callable[[RegistryState], tuple[list[Record], T]]) -> T:
        """Sequence one change: ``decide`` sees the state as the topic has it now and returns the
        records to append and the answer (or raises a RegistryError, and nothing is written).
        Raises NotWriter on a broker that does not lead ``_schemas``."""
        await self.ready_state()
        async with self._write_lock:
            try:
                urls = await self.log.writer()
            except SchemaLogError as e:
                raise errors.store_error(f"could not write to _schemas: {e}") from None
            if urls is not None:
                raise NotWriter(urls)
            try:
                await self.catch_up(self.timeout_s, to_log_end=True)
            except errors.RegistryError:
                if await self.log.writer() is not None:
                    raise NotWriter(()) from None  # the leadership moved meanwhile
                raise
            records, answer = decide(self.state)
            if records:
                try:
                    await self.log.append(records, self.timeout_s)
                except SchemaLogError as e:
                    if e.not_leader:
                        raise NotWriter(()) from None
                    raise errors.store_error(f"could not write to _schemas: {e}") from None
                await self.catch_up()
            return answer
