"""GroupCoordinatorRuntime: runs the pure shard on the broker's loop against __consumer_offsets,
written through the ``PartitionWriter`` the broker provides (strom.coordinator.partition_writer).

- ``start()`` replays every __consumer_offsets partition into the shard (groups and offsets survive
  restarts and crashes), then starts the timer loop.
- Each request runs the shard synchronously (single writer, no locks), appends the records it
  produced (one batch per partition, i.e. one atomic write per group), replays the records that
  take effect only once written (offset commits), flushes when the log's flush policy asks for it,
  and only then answers: a commit is acknowledged once it is in the log, a ConsumerGroupHeartbeat
  once the group's changed records are.
- The timer loop sleeps until the shard's next deadline (session timeouts, rebalance deadlines,
  offset retention) or until an operation may have moved it earlier.

In a cluster this broker coordinates the groups whose __consumer_offsets partition it leads: a
partition is loaded when this broker becomes its leader (requests for its groups get
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and its groups are dropped when the leadership moves
(their parked requests answered NOT_COORDINATOR; clients look the coordinator up again). Writes
are acknowledged once the whole ISR has them, as Kafka's offsets.commit.required.acks=-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from strom.clock import now_ms
from strom.coordinator import records as rec
from strom.coordinator.api import (
    DescribedConsumerGroup,
    DescribedGroup,
    FetchedOffset,
    JoinGroupRequestData,
    JoinGroupResult,
    LeaveGroupResult,
    ListedGroup,
    MemberIdentity,
    OffsetCommitRequestData,
    PartitionError,
    SyncGroupRequestData,
    SyncGroupResult,
)
from strom.coordinator.config import GROUP_METADATA_TOPIC_NAME, GroupRuntimeConfig
from strom.coordinator.consumer_group import HeartbeatError, HeartbeatRequest, HeartbeatResponse, TopicImage
from strom.coordinator.consumer_groups import MEMBER_TIMER
from strom.coordinator.group import Token, TopicPartition
from strom.coordinator.partition_writer import Batch, LogReader, PartitionWriter
from strom.coordinator.placement import Placement, replay_partition, replication_error
from strom.coordinator.result import CoordinatorResult, Record
from strom.coordinator.shard import GroupCoordinatorShard
from strom.coordinator.share_group import ShareHeartbeatError, ShareHeartbeatRequest, ShareHeartbeatResponse
from strom.coordinator.share_groups import SHARE_MEMBER_TIMER, DescribedShareGroup
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec
from strom.records.control import read_marker

log = logging.getLogger("strom.coordinator")

__all__ = ["GROUP_METADATA_TOPIC_NAME", "GroupCoordinatorRuntime", "coordinator_for", "coordinator_of"]

_MAX_TICK_SLEEP_S = 1.0


class GroupCoordinatorRuntime:
    def __init__(self, writer: PartitionWriter, config: GroupRuntimeConfig, clock: Callable[[], int] = now_ms,
                 topics: Callable[[], Mapping[str, TopicImage]] = dict) -> None:
        """``topics``: the broker's topics now (name -> id, partitions), for the classic members of
        consumer groups (online migration)."""
        self.writer = writer
        self.clock = clock
        self.config = config.groups
        self.commit_timeout_s = config.commit_timeout_ms / 1000  # offsets.commit.timeout.ms
        self.shard = GroupCoordinatorShard(self.config, topics)
        self.loaded = False
        self._wakeup = asyncio.Event()
        self._ticker: asyncio.Task[Any] | None = None
        # Told of each share group member that leaves or is expired (group id, member id): the share
        # partitions release what it holds.
        self.share_member_removed: list[Callable[[str, str], None]] = []
        # The __consumer_offsets partitions loaded here (-> leader epoch) and loading.
        self.placement = Placement(config.topic, writer, self._load_owned, self._owned_loaded, self._unload,
                                   self._load_all)

    # ------------------------------------------------------------------ lifecycle

    @property
    def num_partitions(self) -> int:
        return self.placement.num_partitions

    def partition_for(self, group_id: str) -> int:
        return self.placement.partition_for(group_id)

    async def start(self) -> None:
        await self.placement.start()
        self.loaded = True
        self._ticker = self.writer.spawn(self._tick_loop())

    async def _load_all(self) -> None:
        """This broker leads every partition for good (on its own): all of them, before it serves."""
        started = time.monotonic()
        records = 0
        count = self.writer.partition_count(GROUP_METADATA_TOPIC_NAME)
        for partition in range(count or 0):
            plog = self.writer.local_log(GROUP_METADATA_TOPIC_NAME, partition)
            if plog is not None:
                records += await self._load_partition(plog)
        self.shard.loaded(self.clock())
        log.info("group coordinator loaded %d groups from %d records of %s in %.0f ms",
                 len(set(self.shard.groups) | set(self.shard.consumer_groups) | set(self.shard.share_groups)), records, GROUP_METADATA_TOPIC_NAME, (time.monotonic() - started) * 1000)

    # ------------------------------------------------------------------ leadership (cluster)

    async def _load_owned(self, partition: int) -> tuple[int, int, float]:
        """Replay a partition this broker now leads: (groups, records, start time); on failure the
        groups it read are dropped (the load is retried)."""
        started = time.monotonic()
        plog = self.writer.local_log(GROUP_METADATA_TOPIC_NAME, partition)
        before = set(self.shard.groups) | set(self.shard.consumer_groups) | set(self.shard.share_groups)
        try:
            records = await self._load_partition(plog) if plog is not None else 0
        except Exception:
            for group_id in set(self.shard.groups) - before:
                self.shard.groups.pop(group_id, None)
            for group_id in set(self.shard.consumer_groups) - before:
                self.shard.consumer_log.unload(group_id)
            for group_id in set(self.shard.share_groups) - before:
                self.shard.share.log.unload(group_id)
            self.shard.consumer_log.loaded()  # nothing of it stays half loaded
            raise
        return len((set(self.shard.groups) | set(self.shard.consumer_groups)) - before), records, started

    def _owned_loaded(self, partition: int, leader_epoch: int, result: tuple[int, int, float]) -> None:
        groups, records, started = result
        self.shard.loaded(self.clock())
        self._wakeup.set()
        log.info("group coordinator: loaded %s-%d at leader epoch %d (%d groups, %d records) in %.0f ms",
                 GROUP_METADATA_TOPIC_NAME, partition, leader_epoch, groups, records,
                 (time.monotonic() - started) * 1000)

    def _unload(self, partition: int) -> None:
        """Drop the groups of a partition this broker no longer leads; parked joins and syncs are
        answered NOT_COORDINATOR so their clients find the new coordinator."""
        doomed = [g for g in self.shard.groups if self.partition_for(g) == partition]
        for group_id in doomed:
            group = self.shard.groups.pop(group_id)
            for member in group.members.values():
                for token, result in ((member.awaiting_join, JoinGroupResult(E.not_coordinator, member.member_id)),
                                      (member.awaiting_sync, SyncGroupResult(E.not_coordinator))):
                    if isinstance(token, asyncio.Future) and not token.done():
                        token.set_result(result)
        for group_id in [g for g in self.shard.consumer_groups if self.partition_for(g) == partition]:
            for member_id in self.shard.consumer_groups[group_id].members:
                self.shard.timers.cancel((MEMBER_TIMER, group_id, member_id))
            self.shard.consumer_log.unload(group_id)  # the new coordinator reads it from the log
        for group_id in [g for g in self.shard.share_groups if self.partition_for(g) == partition]:
            for member_id in self.shard.share_groups[group_id].members:
                self.shard.timers.cancel((SHARE_MEMBER_TIMER, group_id, member_id))
            self.shard.share.log.unload(group_id)
        log.info("group coordinator: unloaded %s-%d (%d groups)", GROUP_METADATA_TOPIC_NAME, partition, len(doomed))

    def error_for(self, group_id: str) -> E:
        """NONE when this broker coordinates the group now; else what to tell the client."""
        if not self.loaded:
            return E.coordinator_not_available
        return self.placement.error_for(self.partition_for(group_id))

    async def stop(self) -> None:
        self.loaded = False
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    async def _load_partition(self, plog: LogReader) -> int:
        """Replay one partition from its log start to its end. Transactional offset commits wait in
        the shard until their transaction's marker says commit (or abort)."""
        count = 0
        now = self.clock()
        partition = plog.partition

        def on_batch(data: bytes, header: rb.BatchHeader, from_offset: int) -> None:
            nonlocal count
            if header.is_control:
                marker = read_marker(data, header)
                if marker is not None:
                    self._complete_txn(partition, header.producer_id, marker.is_commit)
                return
            pid = header.producer_id if header.is_transactional else -1
            for record in codec.iter_records(data, header):
                if record.offset < from_offset or record.key is None:
                    continue
                try:
                    self.shard.replay(record.key, record.value, now, producer_id=pid)
                    count += 1
                except rec.RecordFormatError as e:
                    log.warning("skipping unreadable record at %s-%d offset %d: %s", plog.topic,
                                plog.partition, record.offset, e)

        await replay_partition(plog, on_batch)
        return count

    def _ensure_topic(self) -> bool:
        """__consumer_offsets exists (True), or its creation is under way (False, in a cluster)."""
        return self.placement.ensure_topic()

    # ------------------------------------------------------------------ running operations

    async def _run(self, op: Callable[[int], CoordinatorResult]) -> None:
        await self._apply(op(self.clock()))
        self._tell_share_members_removed()
        self._wakeup.set()  # the operation may have set an earlier deadline

    def _tell_share_members_removed(self) -> None:
        for group_id, member_id in self.shard.share.take_removed():
            for listener in self.share_member_removed:
                listener(group_id, member_id)

    async def _apply(self, res: CoordinatorResult) -> None:
        if res.records:
            error = E.none
            try:
                error = await self._append(res.records)
            except Exception as e:  # a failed write must not leave requests hanging
                log.error("could not write to %s: %s", GROUP_METADATA_TOPIC_NAME, e)
                error = E.coordinator_not_available
            if error is not E.none:
                failed = res.on_failure(self.clock(), error) if res.on_failure else None
                res = failed if failed is not None else CoordinatorResult(replies=res.replies)
                if res.records:
                    await self._apply(res)
                    return
            else:
                now = self.clock()
                for r in res.records:
                    if r.replay:
                        self.shard.replay(r.key, r.value, now, producer_id=r.producer_id)
        for token, value in res.replies:
            assert isinstance(token, asyncio.Future)
            if not token.done():
                token.set_result(value)

    async def _append(self, records: list[Record]) -> E:
        """Append the records, one batch per partition (and per producer, for transactional offset
        commits), and wait until the ISR has them (offsets.commit.timeout.ms at most). Returns the
        error for the client."""
        self._ensure_topic()
        by_batch: dict[tuple[int, int, int], list[Record]] = defaultdict(list)
        for r in records:
            by_batch[(self.partition_for(r.group_id), r.producer_id, r.producer_epoch)].append(r)
        now = self.clock()
        batches: list[Batch] = []
        for (partition, pid, epoch), recs in sorted(by_batch.items()):
            # Kafka writes a transactional offset commit with the producer's id and epoch, no sequence.
            buf = bytearray(codec.build_batch([(r.key, r.value) for r in recs], timestamp_ms=now, producer_id=pid,
                                              producer_epoch=epoch,
                                              attributes_extra=rb.TRANSACTIONAL_MASK if pid >= 0 else 0))
            batches.append((GROUP_METADATA_TOPIC_NAME, partition, buf))
        results = await self.writer.append(batches, self.commit_timeout_s)
        return replication_error(r.error for r in results)

    async def _call(self, op: Callable[[int, Token], CoordinatorResult]) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._run(lambda now: op(now, fut))
        return await fut

    async def _tick_loop(self) -> None:
        while True:
            deadline = self.shard.next_deadline()
            timeout = _MAX_TICK_SLEEP_S
            if deadline is not None:
                timeout = min(timeout, max(0.0, (deadline - self.clock()) / 1000))
            if timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
            self._wakeup.clear()
            try:
                await self._apply(self.shard.tick(self.clock()))
                self._tell_share_members_removed()
            except Exception:  # keep the coordinator's clock running whatever one timer did
                log.exception("group coordinator timer failed")

    # ------------------------------------------------------------------ the API for handlers

    async def join_group(self, req: JoinGroupRequestData) -> JoinGroupResult:
        result: JoinGroupResult = await self._call(lambda now, t: self.shard.join_group(now, t, req))
        return result

    async def sync_group(self, req: SyncGroupRequestData) -> SyncGroupResult:
        result: SyncGroupResult = await self._call(lambda now, t: self.shard.sync_group(now, t, req))
        return result

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> E:
        return self.shard.heartbeat(self.clock(), group_id, member_id, instance_id, generation)

    async def consumer_group_heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, TopicImage],
                                       client: tuple[str, str] = ("", "")) -> HeartbeatResponse:
        """ConsumerGroupHeartbeat: answered once the records of what it changed (if anything) are
        written, as Kafka answers; raises HeartbeatError. ``client``: the member's client id and host."""
        result = await self._call(lambda now, t: self.shard.consumer_group_heartbeat_written(now, t, req, topics, client))
        if isinstance(result, HeartbeatError):
            raise result
        assert isinstance(result, HeartbeatResponse)
        return result

    def describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup:
        return self.shard.describe_consumer_group(group_id)

    async def share_group_heartbeat(self, req: ShareHeartbeatRequest, topics: Mapping[str, TopicImage],
                                    client: tuple[str, str] = ("", "")) -> ShareHeartbeatResponse:
        """ShareGroupHeartbeat: answered once the group's changed records are written; raises
        ShareHeartbeatError."""
        result = await self._call(lambda now, t: self.shard.share_group_heartbeat(now, t, req, topics, client))
        if isinstance(result, ShareHeartbeatError):
            raise result
        assert isinstance(result, ShareHeartbeatResponse)
        return result

    def describe_share_group(self, group_id: str) -> DescribedShareGroup:
        return self.shard.describe_share_group(group_id)

    def share_offsets_error(self, group_id: str) -> tuple[E, str | None]:
        """NONE when the share group exists and is empty (its share-partition offsets may change)."""
        return self.shard.share_offsets_error(group_id)

    def share_initialized(self, group_id: str) -> dict[uuid.UUID, frozenset[int]] | None:
        """The topic partitions whose share state the share group has (None: no such share group)."""
        return self.shard.share_initialized(group_id)

    async def share_change_initialized(self, group_id: str, add: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                                       remove: set[uuid.UUID]) -> E:
        """Record the share partitions whose offsets were altered (``add``) or deleted (``remove``)."""
        result: E = await self._call(lambda _now, t: self.shard.share_change_initialized(t, group_id, add, remove))
        return result

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> E:
        return self.shard.validate_offset_fetch(group_id, member_id, member_epoch)

    async def leave_group(self, group_id: str, members: list[MemberIdentity]) -> LeaveGroupResult:
        result: LeaveGroupResult = await self._call(lambda now, t: self.shard.leave_group(now, t, group_id, members))
        return result

    async def commit_offsets(self, req: OffsetCommitRequestData) -> list[PartitionError]:
        result: list[PartitionError] = await self._call(lambda now, t: self.shard.commit_offsets(now, t, req))
        return result

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool = False) -> list[FetchedOffset]:
        return self.shard.fetch_offsets(group_id, partitions, require_stable)

    async def txn_commit_offsets(self, req: OffsetCommitRequestData, producer_id: int,
                                 producer_epoch: int) -> list[PartitionError]:
        """TxnOffsetCommit: written now, visible to the group once the transaction commits. A producer
        older than the epoch the partition knows (its transaction was aborted and it was fenced, by a
        new instance or a timeout) is refused: its offsets would wait for a marker that never comes."""
        known = self.writer.producer_epoch(GROUP_METADATA_TOPIC_NAME, self.partition_for(req.group_id), producer_id)
        if known is not None and producer_epoch < known:
            return [PartitionError(p.topic, p.partition, E.producer_fenced) for p in req.partitions]
        result: list[PartitionError] = await self._call(
            lambda now, t: self.shard.txn_commit_offsets(now, t, req, producer_id, producer_epoch))
        return result

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker was written to one of our __consumer_offsets partitions."""
        self._complete_txn(partition, producer_id, commit)

    def _complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        self.shard.offsets.complete_txn(producer_id, commit, lambda g: self.partition_for(g) == partition)

    async def delete_offsets(self, group_id: str,
                             partitions: list[TopicPartition]) -> tuple[E, list[PartitionError]]:
        result: tuple[E, list[PartitionError]] = await self._call(
            lambda now, t: self.shard.delete_offsets(now, t, group_id, partitions))
        return result

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, E]]:
        result: list[tuple[str, E]] = await self._call(lambda now, t: self.shard.delete_groups(now, t, group_ids))
        return result

    def describe_group(self, group_id: str) -> DescribedGroup:
        return self.shard.describe_group(group_id)

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListedGroup]:
        return self.shard.list_groups(states, types)

    def find_coordinator(self) -> bool:
        """FindCoordinator for a group: like Kafka, this is when __consumer_offsets gets created.
        False while it is being created."""
        return self._ensure_topic()


def coordinator_of(broker: Any) -> GroupCoordinatorRuntime | None:
    """The broker's group coordinator once it has loaded; None means COORDINATOR_NOT_AVAILABLE."""
    runtime = getattr(broker, "group_coordinator", None)
    return runtime if runtime is not None and runtime.loaded else None


def coordinator_for(broker: Any, group_id: str) -> tuple[GroupCoordinatorRuntime | None, E]:
    """The group coordinator if this broker coordinates ``group_id`` now, else None and the error
    for the client (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)."""
    runtime = coordinator_of(broker)
    if runtime is None:
        return None, E.coordinator_not_available
    error = runtime.error_for(group_id)
    return (runtime, E.none) if error is E.none else (None, error)
