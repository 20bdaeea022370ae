"""The registry's state kept in ``_schemas``: read from the topic, and changed only by appending to
it. Every write is sequenced through the topic: under one lock, the store first reads the topic to
its end (what any writer appended before is known), decides the records from that state (the next
id, the next version), appends them and waits until they are committed, then reads them back. So
the state is always the topic's, replayed in offset order, and an answer is given only for a
change the topic holds. (In a cluster the appends go through ``_schemas``' one partition and its
leader: one writer at a time.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from strom.registry import errors
from strom.registry.state import RegistryState

log = logging.getLogger("strom.registry")

T = TypeVar("T")
Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


class SchemaLogError(Exception):
    """An append or a read of ``_schemas`` failed (no leader, a timeout, a full disk...)."""


class SchemaLog(Protocol):
    """What the registry needs of the broker: its one partition of ``_schemas``."""

    async def ready(self) -> None:
        """Return once the broker serves (its logs are loaded)."""
        ...

    async def append(self, records: Sequence[Record], timeout_s: float) -> None:
        """Append the records in one batch, making the topic (compacted, one partition) first if
        it does not exist, and wait until they are committed. Raises SchemaLogError."""
        ...

    async def read(self, from_offset: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        """The records from ``from_offset`` up to the committed end (offset, key, value), and the
        offset to read from next; none while the topic does not exist."""
        ...


class Store:
    def __init__(self, schema_log: SchemaLog, timeout_s: float = 30.0) -> None:
        self.log = schema_log
        self.state = RegistryState()
        self.timeout_s = timeout_s
        self._next_offset = 0
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self.loaded = asyncio.Event()

    async def load(self) -> None:
        """Wait for the broker, then replay ``_schemas``."""
        await self.log.ready()
        await self.catch_up()
        self.loaded.set()
        log.info("schema registry loaded %d subjects from _schemas (up to offset %d)",
                 len(self.state.subjects), self._next_offset)

    async def catch_up(self) -> None:
        """Apply what the topic holds past what was read (another broker's writes, and ours)."""
        async with self._read_lock:
            while True:
                try:
                    batch, next_offset = await self.log.read(self._next_offset)
                except SchemaLogError as e:
                    raise errors.store_error(f"could not read _schemas: {e}") from None
                for offset, key, value in batch:
                    if offset >= self._next_offset:
                        self.state.apply(key, value)
                if next_offset <= self._next_offset:
                    return
                self._next_offset = next_offset

    async def ready_state(self) -> RegistryState:
        """The state, once loaded (a request that comes while the broker starts waits for it)."""
        if not self.loaded.is_set():
            try:
                await asyncio.wait_for(self.loaded.wait(), self.timeout_s)
            except TimeoutError:
                raise errors.timeout("the schema registry is still loading _schemas") from None
        return self.state

    async def write(self, decide: Callable[[RegistryState], tuple[list[Record], T]]) -> T:
        """Sequence one change: ``decide`` sees the state as the topic has it now and returns the
        records to append and the answer (or raises a RegistryError, and nothing is written)."""
        await self.ready_state()
        async with self._write_lock:
            await self.catch_up()
            records, answer = decide(self.state)
            if records:
                try:
                    await self.log.append(records, self.timeout_s)
                except SchemaLogError as e:
                    raise errors.store_error(f"could not write to _schemas: {e}") from None
                await self.catch_up()
            return answer
