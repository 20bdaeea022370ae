"""Where a coordinator's keys live, shared by the group and transaction coordinators: which partition
of the internal topic a key maps to, making the topic on first use, following which partitions this
broker leads (loading a partition's keys when it becomes this broker's, dropping them when the
leadership moves), and replaying a partition from its log."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from strom.coordinator import records as rec
from strom.coordinator.config import InternalTopic
from strom.coordinator.partition_writer import LogReader, PartitionWriter
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb

log = logging.getLogger("strom.coordinator")

_LOAD_CHUNK_BYTES = 1 << 20


def complete_batches(data: bytes) -> list[rb.BatchHeader]:
    """The whole batches at the start of ``data`` (a read may end inside a batch)."""
    end = rb.whole_batches_end(data)
    return rb.iter_batches(data[:end]) if end else []


async def replay_partition(plog: LogReader, on_batch: Callable[[bytes, rb.BatchHeader, int], None]) -> None:
    """Hand every batch from the log start to the log end to ``on_batch(data, header, from_offset)``
    (records below ``from_offset`` were seen already); the reads run in a thread."""
    loop = asyncio.get_running_loop()
    offset = plog.log_start_offset
    end = plog.log_end_offset
    max_bytes = _LOAD_CHUNK_BYTES
    while offset < end:
        # Up to the log end, not the high watermark: a new leader's high watermark lags behind
        # records the old leader already had acknowledged (followers learn it one fetch later).
        data = await loop.run_in_executor(None, functools.partial(plog.read, offset, max_bytes, max_offset=end))
        data = bytes(data) if data else b""
        next_offset = offset
        for header in complete_batches(data):
            if header.next_offset <= offset:
                continue
            next_offset = header.next_offset
            on_batch(data, header, offset)
        if next_offset == offset:
            if len(data) < max_bytes:
                break  # nothing more to read (a gap at the end, or the log shrank)
            max_bytes *= 2  # a batch larger than the chunk: read more at once
            continue
        offset = next_offset


def replication_error(errors: Iterable[E]) -> E:
    """A write's outcome for the coordinator's client, Kafka's mapping: a lost leadership is
    NOT_COORDINATOR, the rest COORDINATOR_NOT_AVAILABLE."""
    failed = set(errors) - {E.none}
    if not failed:
        return E.none
    return E.not_coordinator if E.not_leader_or_follower in failed else E.coordinator_not_available


class Placement:
    """The partitions of a coordinator's internal topic and which of them this broker has loaded
    (-> leader epoch) or is loading, as ``PartitionWriter.follow_leadership`` tells (a
    ``LeadershipListener``).

    The runtime gives: ``load(partition)`` replays a partition (undoing what it read if it raises:
    it is retried a second later); ``loaded(partition, leader_epoch, result)`` is called once it is
    this broker's; ``unload(partition)`` when the leadership moves away; ``load_all()`` loads every
    partition at once when this broker leads them all for good (a broker on its own).
    """

    def __init__(self, topic: InternalTopic, writer: PartitionWriter, load: Callable[[int], Awaitable[Any]],
                 loaded: Callable[[int, int, Any], None], unload: Callable[[int], None],
                 load_all: Callable[[], Awaitable[None]]) -> None:
        self.topic = topic
        self.writer = writer
        self._load_partition = load
        self._loaded = loaded
        self._unload = unload
        self._load_all = load_all
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        self.leads_all = False  # this broker leads every partition, for good

    @property
    def name(self) -> str:
        return self.topic.name

    @property
    def num_partitions(self) -> int:
        count = self.writer.partition_count(self.topic.name)
        return count if count is not None else self.topic.num_partitions  # fixed once created

    def partition_for(self, key: str) -> int:
        return rec.partition_for(key, self.num_partitions)  # Kafka's rule, for groups and transactions

    def ensure_topic(self) -> bool:
        """The internal topic exists (True), or its creation is under way (False, in a cluster)."""
        t = self.topic
        rf = t.replication_factor
        if t.capped_at_live_brokers:
            rf = max(1, min(rf, self.writer.live_brokers()))
        return self.writer.ensure_topic(t.name, self.num_partitions, rf, t.configs)

    async def start(self) -> None:
        """Load what this broker leads now, and follow leadership from here on."""
        await self.writer.follow_leadership(self.topic.name, self)

    def error_for(self, partition: int) -> E:
        """NONE if this broker coordinates the partition's keys now, else the error for the client."""
        if self.leads_all:
            return E.none
        if partition in self.loading:
            return E.coordinator_load_in_progress
        return E.none if partition in self.owned else E.not_coordinator

    def write_failed_error(self) -> E:
        """What a client is told when a write failed outright: where the leadership may move, the
        coordinator may be elsewhere by now (NOT_COORDINATOR: look it up again)."""
        return E.coordinator_not_available if self.leads_all else E.not_coordinator

    # ------------------------------------------------------------------ LeadershipListener

    async def leads_every_partition(self) -> None:
        await self._load_all()
        self.leads_all = True

    def became_leader(self, partition: int, leader_epoch: int) -> None:
        if self.owned.get(partition) == leader_epoch or self.loading.get(partition) == leader_epoch:
            return
        if self.owned.pop(partition, None) is not None:
            self._unload(partition)
        self.loading[partition] = leader_epoch
        self.writer.spawn(self._load(partition, leader_epoch))

    def resigned(self, partition: int) -> None:
        self.loading.pop(partition, None)
        if self.owned.pop(partition, None) is not None:
            self._unload(partition)

    async def _load(self, partition: int, leader_epoch: int) -> None:
        try:
            result = await self._load_partition(partition)
        except Exception:
            # Never leave the partition "loading" for good: try again.
            log.exception("loading %s-%d failed; retrying", self.topic.name, partition)
            await asyncio.sleep(1.0)
            if self.loading.get(partition) == leader_epoch:
                self.writer.spawn(self._load(partition, leader_epoch))
            return
        if self.loading.get(partition) != leader_epoch:
            return  # the leadership moved on while loading
        del self.loading[partition]
        self.owned[partition] = leader_epoch
        self._loaded(partition, leader_epoch, result)
