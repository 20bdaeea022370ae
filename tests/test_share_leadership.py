"""The share partition manager when its topic partition's leadership moves (strom.share.manager),
with a fake host and persister: a broker that no longer leads answers NOT_LEADER_OR_FOLLOWER; one
that leads again at a newer epoch forgets what it kept (acknowledgements of records acquired before
are refused) and reads the state anew at its new epoch, which is what fences the older leader at
the share coordinator. And an acknowledgement whose write the share coordinator refuses: the client
gets the error, memory rolls back, and the records are delivered again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers import values_batch

from strom.protocol.errors import ErrorCode as E
from strom.share.manager import SharePartitionManager, ShareSettings
from strom.share.share_partition import StateBatch

TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
KEY = (TOPIC_ID, 0)


class FakeLog:
    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.log_start_offset = 0
        self.high_watermark = count

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes:
        return self.data


@dataclass
class FakeHost:
    log: FakeLog
    epoch: int = 0
    leading: bool = True

    def leader_log(self, topic: str, partition: int) -> tuple[FakeLog | None, int, int]:
        if not self.leading:
            return None, int(E.not_leader_or_follower), -1
        return self.log, 0, self.epoch

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return "t"

    def wait(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> Awaitable[bool]:
        async def waited() -> bool:
            await asyncio.sleep(0)
            return False
        return waited()

    def notify(self, key: tuple[str, int]) -> None:
        pass

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        return asyncio.ensure_future(coro)


@dataclass
class State:
    start_offset: int
    batches: Sequence[StateBatch]
    state_epoch: int = 0


@dataclass
class FakePersister:
    state: State | None = None
    reads: list[int] = field(default_factory=list)  # the leader epoch of each read
    refuse: E | None = None  # the error every write answers, when set
    writes: list[State] = field(default_factory=list)

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> tuple[E, State | None]:
        self.reads.append(leader_epoch)
        return E.none, self.state

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch], state_epoch: int = 0) -> E:
        if self.refuse is not None:
            return self.refuse
        self.state = State(start_offset, list(batches), state_epoch)
        self.writes.append(self.state)
        return E.none


def test_leadership_moving_away_and_back() -> None:
    async def run() -> None:
        host = FakeHost(FakeLog(values_batch([b"a", b"b"]), 2))
        persister = FakePersister()
        manager = SharePartitionManager(host, persister, ShareSettings(), lambda g: {
            "share.auto.offset.reset": "earliest"}, lambda: 0)
        out = await manager.share_fetch("g", "m", 0, 1, [KEY], {}, [], 0, 1 << 20, 10)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in out.partitions[KEY].acquired] == [(0, 1, 1)]
        assert persister.reads == [0]

        host.leading = False  # another broker leads now
        out = await manager.share_fetch("g", "m", 1, 1, [], {}, [], 0, 1 << 20, 10)
        assert out.partitions[KEY].error is E.not_leader_or_follower

        host.leading, host.epoch = True, 1  # led here again, at a newer epoch
        error, _msg, errors = await manager.share_acknowledge("g", "m", 2, {KEY: [(0, 1, (1,))]})
        assert error is E.none and errors[KEY] is E.invalid_record_state  # acquired under the old epoch
        out = await manager.share_fetch("g", "m", 3, 1, [], {}, [], 0, 1 << 20, 10)
        assert persister.reads == [0, 1]  # read anew, at the new epoch
        assert [(a.first_offset, a.last_offset) for a in out.partitions[KEY].acquired] == [(0, 1)]
        error, _msg, errors = await manager.share_acknowledge("g", "m", 4, {KEY: [(0, 1, (1,))]})
        assert errors[KEY] is E.none and persister.state is not None and persister.state.start_offset == 2
        manager.stop()

    asyncio.run(run())


def test_a_refused_write_rolls_the_acknowledgement_back() -> None:
    async def run() -> None:
        host = FakeHost(FakeLog(values_batch([b"a", b"b"]), 2))
        persister = FakePersister()
        now = [0]
        manager = SharePartitionManager(host, persister, ShareSettings(record_lock_duration_ms=15_000), lambda g: {
            "share.auto.offset.reset": "earliest"}, lambda: now[0])
        out = await manager.share_fetch("g", "m", 0, 1, [KEY], {}, [], 0, 1 << 20, 10)
        assert [(a.first_offset, a.last_offset) for a in out.partitions[KEY].acquired] == [(0, 1)]
        persister.refuse = E.coordinator_not_available  # the share coordinator is gone, past the retries
        error, _msg, errors = await manager.share_acknowledge("g", "m", 1, {KEY: [(0, 1, (1,))]})
        assert error is E.none and errors[KEY] is E.coordinator_not_available
        assert persister.state is not None and persister.state.start_offset == 0 and not persister.state.batches
        # Nothing moved: the records are still the member's, to acknowledge again.
        persister.refuse = None
        error, _msg, errors = await manager.share_acknowledge("g", "m", 2, {KEY: [(0, 0, (1,))]})
        assert errors[KEY] is E.none and persister.state.batches == [StateBatch(0, 0, 2, 1)]
        assert persister.state.start_offset == 1
        # A refused RELEASE of the other: when its lock has run out meanwhile, it is available at
        # once, and delivered again (to another member) with its delivery count one higher.
        persister.refuse = E.coordinator_not_available
        now[0] = 15_000
        error, _msg, errors = await manager.share_acknowledge("g", "m", 3, {KEY: [(1, 1, (2,))]})
        assert errors[KEY] is E.coordinator_not_available
        persister.refuse = None
        other = await manager.share_fetch("g", "m2", 0, 2, [KEY], {}, [], 0, 1 << 20, 10)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in other.partitions[KEY].acquired] == [
            (1, 1, 2)]
        manager.stop()

    asyncio.run(run())
