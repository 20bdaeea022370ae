"""SharePartitionManager: the share partitions this broker leads, for every share group that
fetches them, and the share sessions of their members (Kafka's SharePartitionManager).

- ShareFetch: the session is checked and moved on first (share_session.py), then the
  acknowledgements it carries are applied and persisted, then records are acquired from the
  session's partitions; when none can be, the request waits in the purgatory (a produce, or records
  released by others, wake it) until its max wait, like Fetch.
- ShareAcknowledge: the same without the fetch.
- A share partition is made on first use: its state is read from the share coordinator, or, for a
  share group new to the partition, started at the log's end (share.auto.offset.reset=latest, the
  default) or start (earliest) and written at once, so a restart resumes where it was.
- Acknowledgements are answered once the share coordinator has written the new state: an
  acknowledged record is never delivered again, whatever crashes. A write that fails rolls the
  acknowledgement back (the records are ACQUIRED again, or AVAILABLE when their lock ran out) and
  the error goes to the client. Acquisitions are not written (Kafka's SharePartition does not
  either): after a crash the records that were in flight are delivered again, that delivery not
  counted. Each write carries only what changed (Kafka's state batches), merged by the coordinator.
- Locks: each share partition has one timer at its earliest acquisition deadline; expired records
  become available (or archived at the delivery limit), are persisted, and wake waiting fetches.
- A member that closes its session, loses its connection, leaves its group or is expired by the
  group coordinator gives back what it holds at once. When a group has no session left here, its
  share partitions are dropped (Kafka's ShareGroupListener.onGroupEmpty): an admin may change their
  state while the group is empty, so the next fetch reads it anew.

The manager declares what it needs of the broker (``ShareHost``, ``Persister``) and owns nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.share.share_partition import (
    AcquiredRange,
    InvalidRecordState,
    InvalidRequest,
    LogBatch,
    SharePartition,
    SharePartitionSettings,
    StateBatch,
    Transition,
)
from strom.share.share_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    SharePartitionKey,
    ShareSessionCache,
    ShareSessionError,
)

log = logging.getLogger("strom.share")

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
AckBatch = tuple[int, int, Sequence[int]]  # (first offset, last offset, acknowledge types)


class LeaderLog(Protocol):
    """The part of a led partition's log a share partition reads (strom.storage.log.PartitionLog)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes: ...


class ShareHost(Protocol):
    """What the manager uses of the broker: the logs it leads, topic names, the purgatory."""

    def leader_log(self, topic: str, partition: int) -> tuple[LeaderLog | None, int, int]:
        """(log, error, leader epoch) of a partition this broker leads; (None, Kafka's error, -1)."""
        ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def wait(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> Awaitable[bool]: ...

    def notify(self, key: tuple[str, int]) -> None: ...

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...


class PersistedState(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def state_epoch(self) -> int: ...

    @property
    def batches(self) -> Sequence[Any]: ...  # each with first/last offset, delivery state and count


class Persister(Protocol):
    """The share coordinator, as a share partition leader uses it (Kafka's Persister)."""

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> tuple[E, PersistedState | None]: ...

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch], state_epoch: int = 0) -> E:
        """NONE once written; a ``state_epoch`` older than the state's (an admin reset it since)
        is refused with FENCED_STATE_EPOCH."""
        ...


@dataclass(frozen=True, slots=True)
class ShareSettings:
    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    min_record_lock_duration_ms: int = 15_000  # group.share.min.record.lock.duration.ms
    max_record_lock_duration_ms: int = 60_000  # group.share.max.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks
    max_share_sessions: int = 2000  # group.share.max.share.sessions
    fetch_max_bytes: int = 57_671_680  # fetch.max.bytes


@dataclass
class _Share:
    """One share partition with what the manager keeps beside it."""

    group_id: str
    topic: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    sp: SharePartition
    state_epoch: int = 0
    timer: asyncio.TimerHandle | None = None
    timer_at: int | None = None


@dataclass
class PartitionResult:
    topic_id: uuid.UUID
    partition: int
    error: E = E.none
    ack_error: E = E.none
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    leader_epoch: int = -1


@dataclass
class ShareFetchOutcome:
    error: E = E.none
    message: str | None = None
    partitions: dict[SharePartitionKey, PartitionResult] = field(default_factory=dict)
    lock_ms: int = 0


def _batches(data: bytes) -> list[LogBatch]:
    """The batch headers of a log read (whole batches only): no record is decoded."""
    end = rb.whole_batches_end(data)
    return [LogBatch(h.base_offset, h.last_offset, h.is_control)
            for h in rb.iter_batches(data[:end], verify_crc=False)] if end else []


def _trim(data: bytes, last_acquired: int) -> bytes:
    """The batches of ``data`` up to the one holding ``last_acquired`` (the rest would only be
    filtered out by the client)."""
    end = 0
    for h in rb.iter_batches(data[:rb.whole_batches_end(data)], verify_crc=False):
        end = h.position + h.size
        if h.last_offset >= last_acquired:
            break
    return data[:end]


class SharePartitionManager:
    def __init__(self, host: ShareHost, persister: Persister, settings: ShareSettings,
                 group_config: Callable[[str], Mapping[str, str]], clock: Callable[[], int]) -> None:
        self.host = host
        self.persister = persister
        self.settings = settings
        self.group_config = group_config
        self.clock = clock
        self.sessions = ShareSessionCache(settings.max_share_sessions)
        self.shares: dict[tuple[str, uuid.UUID, int], _Share] = {}
        self._initializing: dict[tuple[str, uuid.UUID, int], asyncio.Future[_Share | E]] = {}

    # ------------------------------------------------------------------ settings per group

    def lock_ms(self, group_id: str) -> int:
        """The group's share.record.lock.duration.ms, else the broker's (within the broker's bounds)."""
        s = self.settings
        value = self.group_config(group_id).get(RECORD_LOCK_DURATION)
        if value is None:
            return s.record_lock_duration_ms
        return min(max(int(value), s.min_record_lock_duration_ms), s.max_record_lock_duration_ms)

    # ------------------------------------------------------------------ ShareFetch

    async def share_fetch(self, group_id: str, member_id: str, epoch: int, connection_id: int,
                          add: Sequence[SharePartitionKey], acks: Mapping[SharePartitionKey, Sequence[AckBatch]],
                          forget: Sequence[SharePartitionKey], max_wait_s: float, max_bytes: int,
                          max_records: int) -> ShareFetchOutcome:
        out = ShareFetchOutcome(lock_ms=self.lock_ms(group_id))
        try:
            if epoch == INITIAL_EPOCH:
                if any(acks.values()):
                    return ShareFetchOutcome(E.invalid_request, "Acknowledge data present on initial fetch request")
                session, _old = self.sessions.open(group_id, member_id, connection_id, add)
            else:
                session = self.sessions.check(group_id, member_id, epoch)
                if epoch != FINAL_EPOCH:
                    self.sessions.advance(session, add, forget)
        except ShareSessionError as e:
            return ShareFetchOutcome(e.error, e.message)
        for key, error in (await self._acknowledge(group_id, member_id, acks)).items():
            out.partitions[key] = PartitionResult(key[0], key[1], ack_error=error)
        if epoch == FINAL_EPOCH:
            self._close_session(group_id, member_id)
            return out
        if max_records <= 0:
            return out
        keys = list(session.partitions)
        shares: list[_Share] = []
        for key in keys:
            found = await self._share(group_id, key)
            if isinstance(found, _Share):
                shares.append(found)
            else:
                out.partitions.setdefault(key, PartitionResult(key[0], key[1])).error = found
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_s, 0.0)
        while True:
            # Read, acquire, and (when nothing came) register with the purgatory in one step: a
            # produce or a release after the read always wakes the wait.
            if self._acquire(member_id, shares, max_bytes, max_records, out):
                break
            remaining = deadline - loop.time()
            if remaining <= 0 or not shares or self.sessions.get(group_id, member_id) is not session:
                break
            await self.host.wait([(s.topic, s.partition) for s in shares], remaining)
        return out

    def _acquire(self, member_id: str, shares: list[_Share], max_bytes: int, max_records: int,
                 out: ShareFetchOutcome) -> bool:
        """Acquire from each share partition in turn; True when anything was acquired."""
        remaining_bytes = min(max_bytes, self.settings.fetch_max_bytes)
        remaining_records = max_records
        now = self.clock()
        got = False
        for share in shares:
            if remaining_records <= 0 or remaining_bytes <= 0:
                break
            plog, error, epoch = self.host.leader_log(share.topic, share.partition)
            if plog is None or epoch != share.leader_epoch:
                if plog is not None:
                    self._drop(share)
                    error = E.not_leader_or_follower
                out.partitions.setdefault((share.topic_id, share.partition),
                                          PartitionResult(share.topic_id, share.partition)).error = E(error)
                continue
            sp = share.sp
            if plog.log_start_offset > sp.start_offset:
                sp.advance_start_to(plog.log_start_offset)
            if not sp.can_acquire():
                continue
            offset = sp.next_fetch_offset()
            if offset >= plog.high_watermark:
                continue
            data = bytes(plog.read(offset, remaining_bytes, max_offset=plog.high_watermark, min_one_batch=not got))
            if not data:
                continue
            acquired = sp.acquire(member_id, _batches(data), remaining_records, self.lock_ms(share.group_id), now)
            if not acquired:
                continue
            got = True
            data = _trim(data, acquired[-1].last_offset)
            result = out.partitions.setdefault((share.topic_id, share.partition),
                                               PartitionResult(share.topic_id, share.partition))
            result.records, result.acquired, result.leader_epoch = data, acquired, share.leader_epoch
            remaining_records -= sum(r.last_offset - r.first_offset + 1 for r in acquired)
            remaining_bytes -= len(data)
            self._arm(share)
        return got

    # ------------------------------------------------------------------ ShareAcknowledge

    async def share_acknowledge(self, group_id: str, member_id: str, epoch: int,
                                acks: Mapping[SharePartitionKey, Sequence[AckBatch]]
                                ) -> tuple[E, str | None, dict[SharePartitionKey, E]]:
        if epoch == INITIAL_EPOCH:
            return E.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session", {}
        try:
            session = self.sessions.check(group_id, member_id, epoch)
        except ShareSessionError as e:
            return e.error, e.message, {}
        if epoch != FINAL_EPOCH:
            self.sessions.advance(session, (), ())
        errors = await self._acknowledge(group_id, member_id, acks)
        if epoch == FINAL_EPOCH:
            self._close_session(group_id, member_id)
        return E.none, None, errors

    async def _acknowledge(self, group_id: str, member_id: str,
                           acks: Mapping[SharePartitionKey, Sequence[AckBatch]]) -> dict[SharePartitionKey, E]:
        """Apply the acknowledgements as pending transitions, write each changed share partition's
        new states, then complete them: kept when written, rolled back otherwise. Each partition's
        error (NONE once its new state is written)."""
        errors: dict[SharePartitionKey, E] = {}
        changed: list[tuple[SharePartitionKey, _Share, list[Transition]]] = []
        for key, batches in acks.items():
            if not batches:
                continue
            share = self.shares.get((group_id, key[0], key[1]))
            if share is None:
                errors[key] = E.invalid_record_state  # nothing was acquired there (or a restart forgot it)
                continue
            leading = self._still_leading(share)
            if leading is not E.none:
                # The leadership moved: what was acquired here is the new leader's to hand out again.
                errors[key] = E.invalid_record_state if leading is E.fenced_leader_epoch else leading
                continue
            transitions = []
            try:
                for first, last, types in batches:
                    transitions.append(share.sp.begin_acknowledge(member_id, first, last, types))
            except InvalidRecordState:
                errors[key] = E.invalid_record_state
            except InvalidRequest:
                errors[key] = E.invalid_request
            if transitions:
                changed.append((key, share, transitions))  # what was applied before an error is written too
        written = await asyncio.gather(*(self._write(share, [b for t in ts for b in t.batches()],
                                                     share.sp.start_after(*ts))
                                         for _, share, ts in changed))
        now = self.clock()
        for (key, share, transitions), error in zip(changed, written, strict=True):
            for t in transitions:
                share.sp.complete(t, error is E.none, now)
            if error is not E.none:
                errors[key] = error
                log.warning("share group %s: acknowledgements of %s-%d rolled back, their state could not be "
                            "written: %s", group_id, share.topic, share.partition, error.name)
                if error in (E.fenced_leader_epoch, E.fenced_state_epoch):
                    self._drop(share)  # another leader, or an admin, owns the state now
                else:
                    self._arm(share)  # records ACQUIRED again are under their locks again
            else:
                errors.setdefault(key, E.none)
            self.host.notify((share.topic, share.partition))  # RELEASEd records wake waiting fetches
        return errors

    # ------------------------------------------------------------------ share partitions

    async def _share(self, group_id: str, key: SharePartitionKey) -> _Share | E:
        full = (group_id, key[0], key[1])
        share = self.shares.get(full)
        if share is not None:
            error = self._still_leading(share)
            if error is E.none:
                return share
            if error is not E.fenced_leader_epoch:
                return error
            # Led again at a newer epoch (the leadership went and came back): what this broker
            # kept is stale; the share coordinator has the state.
        pending = self._initializing.get(full)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[_Share | E] = asyncio.get_running_loop().create_future()
        self._initializing[full] = fut
        try:
            result = await self._initialize(group_id, key)
        except Exception:
            log.exception("share partition %s of group %s could not be initialized", key, group_id)
            result = E.unknown_server_error
        finally:
            del self._initializing[full]
        fut.set_result(result)
        if isinstance(result, _Share):
            self.shares[full] = result
        return result

    async def _initialize(self, group_id: str, key: SharePartitionKey) -> _Share | E:
        topic_id, partition = key
        topic = self.host.topic_name(topic_id)
        if topic is None:
            return E.unknown_topic_id
        plog, error, leader_epoch = self.host.leader_log(topic, partition)
        if plog is None:
            return E(error)
        error, state = await self.persister.read_state(group_id, topic_id, partition, leader_epoch)
        if error is not E.none:
            return error
        settings = SharePartitionSettings(self.settings.delivery_count_limit, self.settings.max_record_locks)
        state_epoch = state.state_epoch if state is not None else 0
        if state is not None and state.start_offset >= 0:
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in state.batches]
            sp = SharePartition(state.start_offset, settings, batches)
            log.info("share group %s: %s-%d resumes at offset %d", group_id, topic, partition, sp.start_offset)
        else:
            # No state, or state initialized without a start offset: share.auto.offset.reset says.
            earliest = self.group_config(group_id).get(AUTO_OFFSET_RESET, "latest") == "earliest"
            start = plog.log_start_offset if earliest else plog.high_watermark
            sp = SharePartition(start, settings)
            error = await self.persister.write_state(group_id, topic_id, partition, leader_epoch, start, [],
                                                     state_epoch)
            if error is not E.none:
                return error
            log.info("share group %s: %s-%d starts at offset %d (%s)", group_id, topic, partition, start,
                     "earliest" if earliest else "latest")
        if plog.log_start_offset > sp.start_offset:
            sp.advance_start_to(plog.log_start_offset)
        return _Share(group_id, topic, topic_id, partition, leader_epoch, sp, state_epoch)

    def _still_leading(self, share: _Share) -> E:
        """NONE while this broker leads the share partition's topic partition at the epoch the share
        partition was made at; else the error (FENCED_LEADER_EPOCH: led again, at a newer epoch),
        and the share partition is dropped: its state is the share coordinator's again."""
        plog, error, epoch = self.host.leader_log(share.topic, share.partition)
        if plog is not None and epoch == share.leader_epoch:
            return E.none
        self._drop(share)
        return E.fenced_leader_epoch if plog is not None else E(error)

    def _drop(self, share: _Share) -> None:
        full = (share.group_id, share.topic_id, share.partition)
        if self.shares.get(full) is share:
            del self.shares[full]
            if share.timer is not None:
                share.timer.cancel()
            log.info("share group %s: %s-%d is no longer led here at epoch %d; its share partition is dropped",
                     share.group_id, share.topic, share.partition, share.leader_epoch)

    async def _write(self, share: _Share, batches: Sequence[StateBatch], start_offset: int | None = None) -> E:
        """Write what changed of a share partition, with its start offset, at its epochs."""
        start = share.sp.start_offset if start_offset is None else start_offset
        return await self.persister.write_state(share.group_id, share.topic_id, share.partition, share.leader_epoch,
                                                start, batches, share.state_epoch)

    def _write_released(self, share: _Share) -> asyncio.Task[Any] | None:
        """Write what lock expiries and departures released. They stay released whatever the
        write's outcome (Kafka's releaseAcquisitionLockOnTimeout): a failed write only loses their
        delivery counts, never a record."""
        batches = share.sp.take_released()
        if not batches:
            return None

        async def write() -> None:
            error = await self._write(share, batches)
            if error is not E.none:
                log.warning("share group %s: released records of %s-%d could not be written: %s", share.group_id,
                            share.topic, share.partition, error.name)
        return self.host.spawn(write())

    # ------------------------------------------------------------------ locks and releases

    def _arm(self, share: _Share) -> None:
        """One timer per share partition, at its earliest acquisition deadline."""
        deadline = share.sp.next_lock_deadline()
        if deadline is None or (share.timer_at is not None and share.timer_at <= deadline):
            return
        if share.timer is not None:
            share.timer.cancel()
        share.timer_at = deadline
        delay = max(0.0, (deadline - self.clock()) / 1000)
        share.timer = asyncio.get_running_loop().call_later(delay, self._locks_expired, share)

    def _locks_expired(self, share: _Share) -> None:
        share.timer = share.timer_at = None
        if self.shares.get((share.group_id, share.topic_id, share.partition)) is not share:
            return
        if self._still_leading(share) is not E.none:
            return
        released = share.sp.expire_locks(self.clock())
        if released:
            log.info("share group %s: %d records of %s-%d released after their acquisition lock", share.group_id,
                     released, share.topic, share.partition)
            self._released(share)
        self._arm(share)

    def _released(self, share: _Share) -> asyncio.Task[Any] | None:
        task = self._write_released(share)
        self.host.notify((share.topic, share.partition))
        return task

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member left its group or was expired: what it holds is released. Its session stays
        until the member closes it (a leaving client sends its last acknowledgements with epoch -1,
        perhaps after its leave heartbeat) or its connection goes."""
        self._release(group_id, member_id, "left the group")

    def _release(self, group_id: str, member_id: str, why: str) -> list[asyncio.Task[Any]]:
        writes = []
        for share in [s for s in self.shares.values() if s.group_id == group_id]:
            if self._still_leading(share) is not E.none:
                continue
            released = share.sp.release_member(member_id)
            if released:
                log.info("share group %s: member %s %s; %d records of %s-%d released", group_id, member_id, why,
                         released, share.topic, share.partition)
                task = self._released(share)
                if task is not None:
                    writes.append(task)
        return writes

    def _close_session(self, group_id: str, member_id: str) -> None:
        self.sessions.close(group_id, member_id)
        self._maybe_group_empty(group_id, self._release(group_id, member_id, "closed its share session"))

    def connection_closed(self, connection_id: int) -> None:
        for session in self.sessions.close_connection(connection_id):
            self._maybe_group_empty(session.group_id,
                                    self._release(session.group_id, session.member_id, "lost its connection"))

    def _maybe_group_empty(self, group_id: str, writes: list[asyncio.Task[Any]]) -> None:
        """The group's last session here closed: once what its members held is written back, its
        share partitions are dropped (Kafka's onGroupEmpty), unless a session opened meanwhile."""
        if self.sessions.has_group(group_id):
            return
        if not writes:
            self._drop_group(group_id)
            return

        async def after_writes() -> None:
            await asyncio.gather(*writes, return_exceptions=True)
            if not self.sessions.has_group(group_id):
                self._drop_group(group_id)
        self.host.spawn(after_writes())

    def _drop_group(self, group_id: str) -> None:
        for share in [s for s in self.shares.values() if s.group_id == group_id]:
            if any(r.rollback is not None for r in share.sp.records.values()):
                continue  # an acknowledgement is being written: dropped with the next session's end
            self.forget(group_id, share.topic_id, share.partition)

    def forget(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        """The share partition's state was changed by an admin (AlterShareGroupOffsets,
        DeleteShareGroupOffsets on an empty group): drop what is kept of it here, so that its next
        fetch reads the new state from the share coordinator."""
        share = self.shares.pop((group_id, topic_id, partition), None)
        if share is not None and share.timer is not None:
            share.timer.cancel()

    def stop(self) -> None:
        for share in self.shares.values():
            if share.timer is not None:
                share.timer.cancel()
