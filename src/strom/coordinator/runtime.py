"""GroupCoordinatorRuntime: runs the pure shard on the broker's loop against __consumer_offsets.

- ``start()`` replays every __consumer_offsets partition into the shard (groups and offsets survive
  restarts and crashes), then starts the timer loop.
- Each request runs the shard synchronously (single writer, no locks), appends the records it
  produced (one batch per partition, i.e. one atomic write per group), replays the records that
  take effect only once written (offset commits), flushes when the log's flush policy asks for it,
  and only then answers: a commit is acknowledged once it is in the log.
- The timer loop sleeps until the shard's next deadline (session timeouts, rebalance deadlines,
  offset retention) or until an operation may have moved it earlier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.coordinator import records as rec
from strom.coordinator.api import (
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
from strom.coordinator.config import GroupConfig
from strom.coordinator.group import Token, TopicPartition
from strom.coordinator.result import CoordinatorResult, Record
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec

if TYPE_CHECKING:
    from strom.broker.server import Broker
    from strom.storage.log import PartitionLog

log = logging.getLogger("strom.coordinator")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
_LOAD_CHUNK_BYTES = 1 << 20
_MAX_TICK_SLEEP_S = 1.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinatorRuntime:
    def __init__(self, broker: Broker, clock: Callable[[], int] = now_ms) -> None:
        self.broker = broker
        self.clock = clock
        self.config = GroupConfig.from_broker_config(broker.config)
        self.shard = GroupCoordinatorShard(self.config)
        self.loaded = False
        self._wakeup = asyncio.Event()
        self._ticker: asyncio.Task[Any] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def num_partitions(self) -> int:
        topic = self.broker.metadata.get_topic(GROUP_METADATA_TOPIC_NAME)
        if topic is not None:
            return topic.partitions  # fixed once created, whatever the config says now
        return int(getattr(self.broker.config, "offsets_topic_num_partitions", 50))

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions)

    async def start(self) -> None:
        started = time.monotonic()
        records = 0
        topic = self.broker.metadata.get_topic(GROUP_METADATA_TOPIC_NAME)
        if topic is not None:
            for partition in range(topic.partitions):
                plog = self.broker.log_manager.get_log(GROUP_METADATA_TOPIC_NAME, partition)
                if plog is not None:
                    records += await self._load_partition(plog)
        self.shard.loaded(self.clock())
        self.loaded = True
        self._ticker = self.broker.spawn(self._tick_loop())
        log.info("group coordinator loaded %d groups from %d records of %s in %.0f ms", len(self.shard.groups),
                 records, GROUP_METADATA_TOPIC_NAME, (time.monotonic() - started) * 1000)

    async def stop(self) -> None:
        self.loaded = False
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    async def _load_partition(self, plog: PartitionLog) -> int:
        """Replay one partition from its log start to its end; the reads run in a thread."""
        loop = asyncio.get_running_loop()
        offset = plog.log_start_offset
        end = plog.log_end_offset
        max_bytes = _LOAD_CHUNK_BYTES
        count = 0
        now = self.clock()
        while offset < end:
            data = await loop.run_in_executor(None, plog.read, offset, max_bytes)
            data = bytes(data) if data else b""
            next_offset = offset
            for header in _complete_batches(data):
                if header.next_offset <= offset:
                    continue
                next_offset = header.next_offset
                if header.is_control:
                    continue
                for record in codec.iter_records(data, header):
                    if record.offset < offset or record.key is None:
                        continue
                    try:
                        self.shard.replay(record.key, record.value, now)
                        count += 1
                    except rec.RecordFormatError as e:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s", plog.topic,
                                    plog.partition, record.offset, e)
            if next_offset == offset:
                if len(data) < max_bytes:
                    break  # nothing more to read (a gap at the end, or the log shrank)
                max_bytes *= 2  # a batch larger than the chunk: read more at once
                continue
            offset = next_offset
        return count

    def _ensure_topic(self) -> None:
        if self.broker.metadata.get_topic(GROUP_METADATA_TOPIC_NAME) is not None:
            return
        cfg = self.broker.config
        configs = {"cleanup.policy": "compact"}
        segment_bytes = getattr(cfg, "offsets_topic_segment_bytes", None)
        if segment_bytes:
            configs["segment.bytes"] = str(segment_bytes)
        self.broker.topics.create(GROUP_METADATA_TOPIC_NAME, self.num_partitions, 1, configs, internal=True)

    # ------------------------------------------------------------------ running operations

    async def _run(self, op: Callable[[int], CoordinatorResult]) -> None:
        await self._apply(op(self.clock()))
        self._wakeup.set()  # the operation may have set an earlier deadline

    async def _apply(self, res: CoordinatorResult) -> None:
        if res.records:
            to_flush: list[PartitionLog] = []
            try:
                to_flush = self._append(res.records)
            except Exception as e:  # a failed write must not leave requests hanging
                log.error("could not write to %s: %s", GROUP_METADATA_TOPIC_NAME, e)
                failed = res.on_failure(self.clock(), E.coordinator_not_available) if res.on_failure else None
                res = failed if failed is not None else CoordinatorResult(replies=res.replies)
                if res.records:
                    await self._apply(res)
                    return
            else:
                now = self.clock()
                for r in res.records:
                    if r.replay:
                        self.shard.replay(r.key, r.value, now)
                if to_flush:
                    loop = asyncio.get_running_loop()
                    try:
                        await asyncio.gather(*(loop.run_in_executor(None, p.flush) for p in to_flush))
                    except Exception as e:
                        log.error("could not flush %s: %s", GROUP_METADATA_TOPIC_NAME, e)
        for token, value in res.replies:
            assert isinstance(token, asyncio.Future)
            if not token.done():
                token.set_result(value)

    def _append(self, records: list[Record]) -> list[PartitionLog]:
        """Append the records, one batch per partition; returns the logs that want a flush now."""
        self._ensure_topic()
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for r in records:
            by_partition[self.partition_for(r.group_id)].append(r)
        now = self.clock()
        to_flush = []
        for partition, recs in sorted(by_partition.items()):
            plog = self.broker.log_manager.get_log(GROUP_METADATA_TOPIC_NAME, partition)
            if plog is None:
                raise RuntimeError(f"no log for {GROUP_METADATA_TOPIC_NAME}-{partition}")
            buf = bytearray(codec.build_batch([(r.key, r.value) for r in recs], timestamp_ms=now))
            plog.append(buf, rb.iter_batches(buf), leader_epoch=0)
            self.broker.purgatory.notify((GROUP_METADATA_TOPIC_NAME, partition))
            if plog.needs_flush():
                to_flush.append(plog)
        return to_flush

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

    async def leave_group(self, group_id: str, members: list[MemberIdentity]) -> LeaveGroupResult:
        result: LeaveGroupResult = await self._call(lambda now, t: self.shard.leave_group(now, t, group_id, members))
        return result

    async def commit_offsets(self, req: OffsetCommitRequestData) -> list[PartitionError]:
        result: list[PartitionError] = await self._call(lambda now, t: self.shard.commit_offsets(now, t, req))
        return result

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None) -> list[FetchedOffset]:
        return self.shard.fetch_offsets(group_id, partitions)

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

    def find_coordinator(self) -> None:
        """FindCoordinator for a group: like Kafka, this is when __consumer_offsets gets created."""
        self._ensure_topic()


def _complete_batches(data: bytes) -> list[rb.BatchHeader]:
    """The whole batches at the start of ``data`` (a read may end inside a batch)."""
    end = rb.whole_batches_end(data)
    return rb.iter_batches(data[:end]) if end else []


def coordinator_of(broker: Any) -> GroupCoordinatorRuntime | None:
    """The broker's group coordinator once it has loaded; None means COORDINATOR_NOT_AVAILABLE."""
    runtime = getattr(broker, "group_coordinator", None)
    return runtime if runtime is not None and runtime.loaded else None
