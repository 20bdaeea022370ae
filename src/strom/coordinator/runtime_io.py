"""How a coordinator runtime reads and writes its internal topic's partitions (shared by the group
and transaction coordinators): replay a partition from its log start, append one batch to a
partition this broker leads, and wait for the ISR to have it."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.replication.leader_append import AppendOrigin

if TYPE_CHECKING:
    from strom.storage.log import PartitionLog

log = logging.getLogger("strom.coordinator")

_LOAD_CHUNK_BYTES = 1 << 20

# A write's completion: its results once the ISR has it (ReplicaManager.append_records).
Wait = Awaitable[list[dict[str, Any]]]


def complete_batches(data: bytes) -> list[rb.BatchHeader]:
    """The whole batches at the start of ``data`` (a read may end inside a batch)."""
    end = rb.whole_batches_end(data)
    return rb.iter_batches(data[:end]) if end else []


async def replay_partition(plog: PartitionLog, on_batch: Callable[[bytes, rb.BatchHeader, int], None]) -> None:
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


def append_batch(broker: Any, topic: str, partition: int, buf: bytearray,
                 timeout_s: float = 5.0) -> tuple[PartitionLog, Wait | None]:
    """Append one batch to a partition this broker leads (RuntimeError if it does not). Returns the
    log and what to wait for before the write counts (the ISR has it)."""
    plog, _error, _epoch = broker.replica_manager.leader_log(topic, partition)
    if plog is None:
        raise RuntimeError(f"this broker does not lead {topic}-{partition}")
    outcome = broker.replica_manager.append_records(-1, timeout_s, [(topic, partition, buf)], AppendOrigin.COORDINATOR)
    return plog, outcome if not isinstance(outcome, list) else None


async def wait_replicated(broker: Any, waits: list[Wait], timeout_s: float) -> E:
    """Until the ISR has the records. Kafka's mapping of what can go wrong: a lost leadership is
    NOT_COORDINATOR, the rest COORDINATOR_NOT_AVAILABLE."""
    if not waits:
        return E.none
    errors = {result["error_code"] for wait in waits for result in await wait} - {E.none}
    if not errors:
        return E.none
    return E.not_coordinator if E.not_leader_or_follower in errors else E.coordinator_not_available


async def flush_logs(logs: list[PartitionLog]) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(None, p.flush) for p in logs))


class Leadership:
    """Which partitions of a coordinator's internal topic this broker has loaded (-> leader epoch) and
    which it is loading, following the replica manager (a cluster).

    ``load(partition)`` replays a partition (undoing what it read if it raises: it is retried a
    second later); ``loaded(partition, leader_epoch, result)`` is called once it is this broker's;
    ``unload(partition)`` when the leadership moves away.
    """

    def __init__(self, broker: Any, topic: str, load: Callable[[int], Awaitable[Any]],
                 loaded: Callable[[int, int, Any], None], unload: Callable[[int], None]) -> None:
        self.broker = broker
        self.topic = topic
        self._load_partition = load
        self._loaded = loaded
        self._unload = unload
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}

    def follow(self) -> None:
        """Load what this broker leads now, and follow leadership from here on."""
        replicas = self.broker.replica_manager
        replicas.leadership_listeners.append(self.changed)
        for part in list(replicas.partitions.values()):
            if part.topic == self.topic and part.is_leader:
                self.changed(part.topic, part.partition, part.leader_epoch)

    def changed(self, topic: str, partition: int, leader_epoch: int) -> None:
        """From the replica manager: this broker leads ``partition`` at ``leader_epoch`` (>= 0), or
        no longer leads it (-1)."""
        if topic != self.topic:
            return
        if leader_epoch < 0:
            self.loading.pop(partition, None)
            if self.owned.pop(partition, None) is not None:
                self._unload(partition)
            return
        if self.owned.get(partition) == leader_epoch or self.loading.get(partition) == leader_epoch:
            return
        if self.owned.pop(partition, None) is not None:
            self._unload(partition)
        self.loading[partition] = leader_epoch
        self.broker.spawn(self._load(partition, leader_epoch))

    async def _load(self, partition: int, leader_epoch: int) -> None:
        try:
            result = await self._load_partition(partition)
        except Exception:
            # Never leave the partition "loading" for good: try again.
            log.exception("loading %s-%d failed; retrying", self.topic, partition)
            await asyncio.sleep(1.0)
            if self.loading.get(partition) == leader_epoch:
                self.broker.spawn(self._load(partition, leader_epoch))
            return
        if self.loading.get(partition) != leader_epoch:
            return  # the leadership moved on while loading
        del self.loading[partition]
        self.owned[partition] = leader_epoch
        self._loaded(partition, leader_epoch, result)

    def error_for(self, partition: int) -> E:
        """In a cluster: NONE if this broker coordinates the partition's keys now, else the error."""
        if partition in self.loading:
            return E.coordinator_load_in_progress
        return E.none if partition in self.owned else E.not_coordinator
