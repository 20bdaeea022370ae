"""SharePartition: one share group's view of one topic partition (KIP-932), a pure state machine.

The share-partition start offset (SPSO) is the first offset not yet done with; the end offset
(SPEO) is one past the last offset ever acquired. Between them every record of the log has a state:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--> ACKNOWLEDGED
        ^                      |---REJECT--> ARCHIVED
        +--RELEASE / lock expiry / member gone (delivery count < limit; else ARCHIVED)

Acquiring a record counts one delivery and locks it for one member until a deadline. The start
offset moves past records that are ACKNOWLEDGED or ARCHIVED (or that the log does not hold: control
batches, compacted offsets); the window end - start is bounded by group.share.partition.max.record.locks.
Time is an argument; nothing here does I/O. The manager (share/manager.py) persists the state
through the share coordinator and answers the clients.

An acknowledgement is a transition (Kafka's startStateTransition / completeStateTransition): its
records take their new state at once but stay *pending* — not acquirable, not acknowledgeable, the
start offset not moved past them — until the manager has written the change (``Transition.batches``)
and completes it. A write that fails rolls the records back to ACQUIRED by their member, or, when
their lock ran out meanwhile, to AVAILABLE (ARCHIVED at the delivery limit): memory is never ahead
of what the share coordinator holds. Releases on lock expiry or departure apply at once (a failed
write of those only loses delivery counts). Acquisitions are never written (as in Kafka): what a
leader crash loses of them is the delivery it counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum


class RecordState(IntEnum):
    """Kafka's RecordState (the persisted values: 0, 2 and 4; ACQUIRED is never written)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class InvalidRecordState(Exception):
    """An acknowledgement of records that are not acquired by this member (INVALID_RECORD_STATE)."""


class InvalidRequest(Exception):
    """An acknowledgement that cannot be applied as sent (INVALID_REQUEST)."""


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline: int = 0
    # While an acknowledgement of the record is being written: what it was before (Kafka's
    # RollbackState), else None.
    rollback: tuple[RecordState, str | None, int] | None = None


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """ShareFetch's AcquiredRecords: offsets first..last, all delivered ``delivery_count`` times."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one persisted state and delivery count (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What the manager read of one record batch: its offsets and whether it is a control batch."""

    base_offset: int
    last_offset: int
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class SharePartitionSettings:
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks


@dataclass(slots=True)
class Transition:
    """An acknowledgement applied in memory, pending until its write completes it."""

    records: list[tuple[int, InFlight]] = field(default_factory=list)

    def batches(self) -> list[StateBatch]:
        """The new states as runs for the share coordinator (Kafka writes only what changed)."""
        return _runs((o, r) for o, r in self.records)


def _runs(records: Iterable[tuple[int, InFlight]]) -> list[StateBatch]:
    out: list[StateBatch] = []
    for offset, r in records:
        state = RecordState.AVAILABLE if r.state is RecordState.ACQUIRED else r.state
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_state == state \
                and out[-1].delivery_count == r.delivery_count:
            last = out[-1]
            out[-1] = StateBatch(last.first_offset, offset, last.delivery_state, last.delivery_count)
        else:
            out.append(StateBatch(offset, offset, int(state), r.delivery_count))
    return out


class SharePartition:
    def __init__(self, start_offset: int, settings: SharePartitionSettings,
                 batches: Sequence[StateBatch] = ()) -> None:
        self.settings = settings
        self.start_offset = start_offset
        self.end_offset = start_offset
        # offset -> state, in offset order (inserted ascending); absent offsets in [start, end) are done
        self.records: dict[int, InFlight] = {}
        self._locks: list[tuple[int, int]] = []  # (deadline, offset), stale entries skipped
        self._released: dict[int, InFlight] = {}  # released since the last take_released()
        for b in batches:
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                state = RecordState(b.delivery_state) if b.delivery_state in (0, 2, 4) else RecordState.AVAILABLE
                self.records[offset] = InFlight(state, b.delivery_count)
            self.end_offset = max(self.end_offset, b.last_offset + 1)
        self._advance_start()

    def advance_start_to(self, offset: int) -> None:
        """The log no longer holds what is below ``offset`` (retention, DeleteRecords): forget it."""
        if offset <= self.start_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance_start()

    # ------------------------------------------------------------------ acquiring

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads the log from: the first AVAILABLE record, else the end."""
        for offset, r in self.records.items():
            if r.state is RecordState.AVAILABLE and r.rollback is None:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Something may be acquired: a record AVAILABLE, or room in the window for new ones."""
        if self.end_offset - self.start_offset < self.settings.max_record_locks:
            return True
        return any(r.state is RecordState.AVAILABLE and r.rollback is None for r in self.records.values())

    def acquire(self, member_id: str, batches: Iterable[LogBatch], max_records: int, lock_ms: int,
                now: int) -> list[AcquiredRange]:
        """Acquire for ``member_id`` up to ``max_records`` records among those the log holds in
        ``batches`` (read from ``next_fetch_offset``): AVAILABLE ones again, and new ones past the
        end while the window has room. Each acquired record's delivery count goes up by one."""
        out: list[AcquiredRange] = []
        deadline = now + lock_ms
        taken = 0
        for batch in batches:
            if taken >= max_records:
                break
            if batch.is_control:
                # Never delivered: its offset is done (absent from the records).
                if batch.last_offset >= self.end_offset and self._window_has_room(batch.base_offset):
                    self.end_offset = batch.last_offset + 1
                continue
            for offset in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                if taken >= max_records:
                    break
                if offset < self.end_offset:
                    r = self.records.get(offset)
                    if r is None or r.state is not RecordState.AVAILABLE or r.rollback is not None:
                        continue
                    r.delivery_count += 1
                else:
                    if not self._window_has_room(offset):
                        return self._done(out)
                    r = self.records[offset] = InFlight(RecordState.AVAILABLE, 1)
                    self.end_offset = offset + 1
                r.state = RecordState.ACQUIRED
                r.member_id = member_id
                r.lock_deadline = deadline
                heapq.heappush(self._locks, (deadline, offset))
                taken += 1
                if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == r.delivery_count:
                    out[-1] = AcquiredRange(out[-1].first_offset, offset, r.delivery_count)
                else:
                    out.append(AcquiredRange(offset, offset, r.delivery_count))
        return self._done(out)

    def _done(self, out: list[AcquiredRange]) -> list[AcquiredRange]:
        self._advance_start()
        return out

    def _window_has_room(self, offset: int) -> bool:
        return offset - self.start_offset < self.settings.max_record_locks

    # ------------------------------------------------------------------ acknowledging

    def acknowledge(self, member_id: str, first_offset: int, last_offset: int,
                    types: Sequence[int]) -> None:
        """An acknowledgement applied and completed at once (as if its write succeeded)."""
        self.complete(self.begin_acknowledge(member_id, first_offset, last_offset, types), True, 0)

    def begin_acknowledge(self, member_id: str, first_offset: int, last_offset: int,
                          types: Sequence[int]) -> Transition:
        """One AcknowledgementBatch: one type for every offset, or one type per offset. Every
        offset (but GAPs) must be ACQUIRED by ``member_id`` (and not pending); nothing changes
        otherwise. The records take their new states, pending until ``complete``."""
        if last_offset < first_offset or not types:
            raise InvalidRequest(f"bad acknowledgement batch {first_offset}-{last_offset}")
        count = last_offset - first_offset + 1
        if len(types) not in (1, count):
            raise InvalidRequest(f"{len(types)} acknowledge types for {count} offsets")
        if any(t not in (0, 1, 2, 3) for t in types):
            raise InvalidRequest(f"unknown acknowledge type in {list(types)}")
        plan = []
        for i, offset in enumerate(range(first_offset, last_offset + 1)):
            kind = AcknowledgeType(types[0] if len(types) == 1 else types[i])
            r = self.records.get(offset) if offset >= self.start_offset else None
            if kind is AcknowledgeType.GAP:
                if r is not None and r.state is RecordState.ACQUIRED and r.member_id == member_id:
                    plan.append((offset, r, AcknowledgeType.REJECT))  # a gap the client saw: nothing to deliver
                continue
            if r is None or r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                raise InvalidRecordState(f"offset {offset} is not acquired by member {member_id}")
            plan.append((offset, r, kind))
        transition = Transition()
        for offset, r, kind in plan:
            r.rollback = (r.state, r.member_id, r.lock_deadline)
            if kind is AcknowledgeType.ACCEPT:
                self._finish(r, RecordState.ACKNOWLEDGED)
            elif kind is AcknowledgeType.REJECT:
                self._finish(r, RecordState.ARCHIVED)
            else:
                self._release(r)
            transition.records.append((offset, r))
        return transition

    def complete(self, transition: Transition, written: bool, now: int) -> int:
        """The transition's write is done. Written: the new states stay and the start offset may
        move. Not written: each record is ACQUIRED by its member again under its lock, or, when the
        lock ran out by ``now``, AVAILABLE (ARCHIVED at the delivery limit). Returns how many
        records became AVAILABLE by the rollback."""
        available = 0
        for offset, r in transition.records:
            if r.rollback is None or self.records.get(offset) is not r:
                continue  # forgotten meanwhile (the log start moved past it)
            state, member_id, deadline = r.rollback
            r.rollback = None
            if written:
                continue
            if deadline > now:
                r.state, r.member_id, r.lock_deadline = state, member_id, deadline
                heapq.heappush(self._locks, (deadline, offset))
            else:
                self._release(r)
                available += r.state is RecordState.AVAILABLE
        self._advance_start()
        return available

    # ------------------------------------------------------------------ releasing

    def release_member(self, member_id: str) -> int:
        """The member left or died: what it holds becomes available again. Returns how many."""
        released = 0
        for offset, r in self.records.items():
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                self._released[offset] = r
                released += 1
        self._advance_start()
        return released

    def expire_locks(self, now: int) -> int:
        """Records whose acquisition lock ran out by ``now`` are released. Returns how many."""
        released = 0
        while self._locks and self._locks[0][0] <= now:
            deadline, offset = heapq.heappop(self._locks)
            r = self.records.get(offset)
            if r is not None and r.state is RecordState.ACQUIRED and r.lock_deadline == deadline:
                self._release(r)
                self._released[offset] = r
                released += 1
        if released:
            self._advance_start()
        return released

    def next_lock_deadline(self) -> int | None:
        while self._locks:
            deadline, offset = self._locks[0]
            r = self.records.get(offset)
            if r is not None and r.state is RecordState.ACQUIRED and r.lock_deadline == deadline:
                return deadline
            heapq.heappop(self._locks)
        return None

    def _release(self, r: InFlight) -> None:
        # The delivery limit: a record delivered that many times is archived, never offered again.
        state = RecordState.ARCHIVED if r.delivery_count >= self.settings.delivery_count_limit \
            else RecordState.AVAILABLE
        self._finish(r, state)

    @staticmethod
    def _finish(r: InFlight, state: RecordState) -> None:
        r.state = state
        r.member_id = None
        r.lock_deadline = 0

    def _advance_start(self) -> None:
        records = self.records
        while records:
            offset = next(iter(records))
            if records[offset].state not in TERMINAL or records[offset].rollback is not None:
                self.start_offset = max(self.start_offset, offset)
                return
            del records[offset]
        self.start_offset = self.end_offset

    # ------------------------------------------------------------------ persisting

    def state_batches(self) -> list[StateBatch]:
        """The whole in-flight state as runs of (state, delivery count), as written: an acquired
        record as AVAILABLE (after a failure it is delivered again), a pending one as it was."""
        def committed(r: InFlight) -> InFlight:
            return r if r.rollback is None else InFlight(r.rollback[0], r.delivery_count)
        return _runs((o, committed(r)) for o, r in self.records.items())

    def start_after(self, *transitions: Transition) -> int:
        """The start offset once ``transitions`` complete written (other pending ones not)."""
        mine = {id(r) for t in transitions for _, r in t.records}
        for offset, r in self.records.items():
            if r.state not in TERMINAL or (r.rollback is not None and id(r) not in mine):
                return offset
        return self.end_offset

    def take_released(self) -> list[StateBatch]:
        """What lock expiries and departures released since the last call, to be written."""
        released, self._released = self._released, {}
        return _runs(sorted((o, r) for o, r in released.items() if self.records.get(o) is r))

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for o, r in self.records.items() if r.state is RecordState.ACQUIRED and r.member_id == member_id]
