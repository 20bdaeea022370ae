"""ShareCoordinatorRuntime: runs the share coordinator's pure shard (share-partition state, KIP-932)
against __share_group_state through the ``PartitionWriter`` the broker provides, as the group and
transaction coordinators run theirs.

A partition of __share_group_state is replayed when this broker becomes its leader (all of them at
start on a broker of its own) and dropped when the leadership moves. ``write_state`` answers once
the record is in the ISR (and fsynced when the topic's flush policy asks), so what a share partition
leader was told is written survives a crash; ``read_state`` answers from memory.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strom.clock import now_ms
from strom.coordinator import records as rec
from strom.coordinator import share_state_records as ssr
from strom.coordinator.config import SHARE_GROUP_STATE_TOPIC_NAME, InternalTopic
from strom.coordinator.partition_writer import LogReader, PartitionWriter
from strom.coordinator.placement import Placement, replay_partition, replication_error
from strom.coordinator.share_coordinator import (
    ShareCoordinatorShard,
    ShareState,
    delete_keys,
    delivery_complete_count,
    initialize_write,
)
from strom.coordinator.share_state_records import PersistedBatch, SharePartitionKey
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec

log = logging.getLogger("strom.share")


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


@dataclass(frozen=True, slots=True)
class ShareRuntimeConfig:
    topic: InternalTopic
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    write_timeout_ms: int = 5000  # share.coordinator.write.timeout.ms


class ShareCoordinatorRuntime:
    def __init__(self, writer: PartitionWriter, config: ShareRuntimeConfig, clock: Callable[[], int] = now_ms) -> None:
        self.writer = writer
        self.clock = clock
        self.shard = ShareCoordinatorShard(config.updates_per_snapshot)
        self.write_timeout_s = config.write_timeout_ms / 1000
        self.loaded = False
        self.placement = Placement(config.topic, writer, self._load_owned, self._owned_loaded, self._unload,
                                   self._load_all)

    def partition_for(self, key: SharePartitionKey | str) -> int:
        """The state's partition for a share partition, or for its coordinator key
        "group:topicId:partition" as FindCoordinator's share key type names it."""
        return self.placement.partition_for(key if isinstance(key, str) else key.coordinator_key())

    def find_coordinator(self) -> bool:
        """FindCoordinator for a share key: like Kafka, when __share_group_state gets created.
        False while it is being created."""
        return self.placement.ensure_topic()

    def state_partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The partition of __share_group_state that keeps the share partition's state; None while
        the topic does not exist (its creation is started: Kafka makes it on first use)."""
        if self.writer.partition_count(SHARE_GROUP_STATE_TOPIC_NAME) is None:
            try:
                self.placement.ensure_topic()
            except Exception as e:  # cannot be made now (e.g. no broker registered yet): asked again
                log.warning("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC_NAME, e)
            return None
        return self.partition_for(SharePartitionKey(group_id, topic_id, partition))

    def error_for(self, key: SharePartitionKey) -> E:
        if not self.loaded:
            return E.coordinator_not_available
        return self.placement.error_for(self.partition_for(key))

    async def start(self) -> None:
        await self.placement.start()
        self.loaded = True

    async def stop(self) -> None:
        self.loaded = False

    # ------------------------------------------------------------------ loading

    async def _load_all(self) -> None:
        started = time.monotonic()
        count = self.writer.partition_count(SHARE_GROUP_STATE_TOPIC_NAME)
        for partition in range(count or 0):
            plog = self.writer.local_log(SHARE_GROUP_STATE_TOPIC_NAME, partition)
            if plog is not None:
                await self._load_partition(plog)
        log.info("share coordinator loaded %d share partitions from %s in %.0f ms", len(self.shard.states),
                 SHARE_GROUP_STATE_TOPIC_NAME, (time.monotonic() - started) * 1000)

    async def _load_owned(self, partition: int) -> None:
        plog = self.writer.local_log(SHARE_GROUP_STATE_TOPIC_NAME, partition)
        try:
            if plog is not None:
                await self._load_partition(plog)
        except Exception:
            self._unload(partition)
            raise

    def _owned_loaded(self, partition: int, leader_epoch: int, _result: None) -> None:
        count = sum(1 for k in self.shard.states if self.partition_for(k) == partition)
        log.info("share coordinator: loaded %s-%d at leader epoch %d (%d share partitions)",
                 SHARE_GROUP_STATE_TOPIC_NAME, partition, leader_epoch, count)

    def _unload(self, partition: int) -> None:
        self.shard.drop(lambda k: self.partition_for(k) != partition)

    async def _load_partition(self, plog: LogReader) -> None:
        shard = self.shard

        def on_batch(data: bytes, header: rb.BatchHeader, from_offset: int) -> None:
            if header.is_control:
                return
            for record in codec.iter_records(data, header):
                if record.offset < from_offset or record.key is None:
                    continue
                try:
                    record_type, key = ssr.decode_key(record.key)
                    value = None if record.value is None else ssr.decode_value(record_type, record.value)
                    shard.replay(record_type, key, value)
                except rec.RecordFormatError as e:
                    log.warning("skipping unreadable record at %s-%d offset %d: %s", plog.topic, plog.partition,
                                record.offset, e)

        await replay_partition(plog, on_batch)

    # ------------------------------------------------------------------ the persister's calls

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[E, ShareStateSummary | None]:
        """Kafka's ReadShareGroupStateSummary: the share partition's start offset and epochs and
        how many records after the start are done, for describing it; None when it has no state.
        Records no leader epoch."""
        key = SharePartitionKey(group_id, topic_id, partition)
        error = self.error_for(key)
        if error is not E.none:
            return error, None
        state = self.shard.summary(key)
        if state is None:
            return E.none, None
        return E.none, ShareStateSummary(state.state_epoch, state.leader_epoch, state.start_offset,
                                         delivery_complete_count(state))

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int = -1) -> tuple[E, ShareState | None]:
        """Kafka's ReadShareGroupState: the share partition's state, None when it has none yet. A
        read by a newer leader of the topic partition records its epoch first (Kafka's
        readStateAndMaybeUpdateLeaderEpoch): from then on the older leader's writes are fenced."""
        key = SharePartitionKey(group_id, topic_id, partition)
        error = self.error_for(key)
        if error is not E.none:
            return error, None
        state = self.shard.read(key)
        if state is not None and leader_epoch >= 0:
            if leader_epoch < state.leader_epoch:
                return E.fenced_leader_epoch, None
            if leader_epoch > state.leader_epoch:
                error = await self.write_state(group_id, topic_id, partition, leader_epoch, -1, [])
                if error is not E.none:
                    return error, None
                state = self.shard.read(key)
        return E.none, state

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[PersistedBatch], state_epoch: int = -1) -> E:
        """Kafka's WriteShareGroupState: NONE once the state is written (and applied)."""
        key = SharePartitionKey(group_id, topic_id, partition)
        error = self.error_for(key)
        if error is not E.none:
            return error
        write = self.shard.write(key, leader_epoch, start_offset, batches, self.clock(), state_epoch)
        if isinstance(write, E):
            return write
        partition_of_state = self.partition_for(key)
        buf = bytearray(codec.build_batch([(write.key, write.value)], timestamp_ms=self.clock()))
        try:
            self.placement.ensure_topic()
            [result] = await self.writer.append([(SHARE_GROUP_STATE_TOPIC_NAME, partition_of_state, buf)],
                                                self.write_timeout_s)
            error = replication_error([result.error])
        except Exception as e:
            log.error("could not write to %s-%d: %s", SHARE_GROUP_STATE_TOPIC_NAME, partition_of_state, e)
            error = self.placement.write_failed_error()
        if error is E.none:
            self.shard.written(write)
        return error

    # ------------------------------------------------------------------ the admin's calls (APIs 90-92)

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int,
                               state_epoch: int = 0) -> E:
        """Kafka's InitializeShareGroupState: the share partition starts afresh at ``start_offset``
        (AlterShareGroupOffsets). NONE once written."""
        key = SharePartitionKey(group_id, topic_id, partition)
        old = self.shard.read(key)
        if old is not None and state_epoch != -1 and state_epoch < old.state_epoch:
            return E.fenced_state_epoch  # Kafka's maybeGetInitializeStateError
        write = initialize_write(self.shard, key, start_offset, state_epoch, self.clock())
        error = await self._append_records(key, [(write.key, write.value)])
        if error is E.none:
            self.shard.written(write)
        return error

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> E:
        """Kafka's DeleteShareGroupState: the share partition's state is gone (DeleteShareGroupOffsets);
        its next fetch starts it again from share.auto.offset.reset. NONE once written."""
        key = SharePartitionKey(group_id, topic_id, partition)
        if self.shard.read(key) is None and self.error_for(key) is E.none:
            return E.none
        error = await self._append_records(key, [(k, None) for k in delete_keys(key)])
        if error is E.none:
            self.shard.states.pop(key, None)
        return error

    async def _append_records(self, key: SharePartitionKey, records: list[tuple[bytes, bytes | None]]) -> E:
        error = self.error_for(key)
        if error is not E.none:
            return error
        partition_of_state = self.partition_for(key)
        buf = bytearray(codec.build_batch(records, timestamp_ms=self.clock()))
        try:
            self.placement.ensure_topic()
            [result] = await self.writer.append([(SHARE_GROUP_STATE_TOPIC_NAME, partition_of_state, buf)],
                                                self.write_timeout_s)
            return replication_error([result.error])
        except Exception as e:
            log.error("could not write to %s-%d: %s", SHARE_GROUP_STATE_TOPIC_NAME, partition_of_state, e)
            return self.placement.write_failed_error()
