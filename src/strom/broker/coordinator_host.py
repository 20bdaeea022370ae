"""The broker's side of the coordinators' ``PartitionWriter`` (strom.coordinator.partition_writer):
how the group and transaction coordinators append to, read and follow the partitions of their
internal topics on this broker. Built and handed to them by broker/server.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from strom.coordinator.partition_writer import AppendResult, Batch, LeadershipListener, NotLeaderError
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb

if TYPE_CHECKING:
    from strom.broker.purgatory import Purgatory
    from strom.cluster.metadata import MetadataStore
    from strom.replication.partition import Partition
    from strom.storage.log import PartitionLog
    from strom.storage.log_manager import LogManager

TopicPartition = tuple[str, int]


class Replicas(Protocol):
    """What the host uses of the replica manager (strom.replication.replica_manager)."""

    partitions: dict[TopicPartition, Partition]
    leadership_listeners: list[Callable[[str, int, int], None]]

    def leader_partition(self, topic: str, p: int, current_leader_epoch: int = -1) -> tuple[Partition | None, int]: ...

    def appended(self, part: Partition) -> None: ...

    async def wait_for_acks(self, waits: list[tuple[Partition, int, dict[str, Any]]], timeout_s: float,
                            min_isr: dict[TopicPartition, int]) -> None: ...


class CoordinatorHost:
    """A ``PartitionWriter`` over this broker's logs and, in a cluster, its replica manager
    (``replicas``: None on a single broker, which leads every partition at leader epoch 0)."""

    def __init__(self, log_manager: LogManager, purgatory: Purgatory, replicas: Replicas | None,
                 metadata: MetadataStore, ensure_internal: Callable[[str, int, int, dict[str, str]], bool],
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]) -> None:
        self._log_manager = log_manager
        self._purgatory = purgatory
        self._replicas = replicas
        self._metadata = metadata
        self._ensure_internal = ensure_internal  # TopicManager.ensure_internal
        self._spawn = spawn

    async def append(self, batches: Sequence[Batch], timeout_s: float,
                     on_appended: Callable[[str, int], None] | None = None) -> list[AppendResult]:
        """Append each batch as its partition's leader, in order, then wait until the ISR has them
        all (acks=all). Raises at the first batch that cannot be appended (NotLeaderError, or the
        log's own error). ``on_appended(topic, partition)`` runs after each append, before the wait.

        The one place where a coordinator's write (and a transaction marker) meets the replication
        layer: the leader lookup, the partition log's append, the wake-up of waiting fetches and,
        in a cluster, ``ReplicaManager.wait_for_acks``. Once replication offers one call that does
        the min-ISR check, the append and the wait (``ReplicaManager.append_records``), this method
        calls that instead.
        """
        replicas = self._replicas
        flush_due: list[bool] = []
        waits: list[tuple[Partition, int, dict[str, Any]]] = []
        for topic, partition, buf in batches:
            if replicas is None:
                plog = self._log_manager.get_log(topic, partition)
                if plog is None:
                    raise NotLeaderError(topic, partition, E.unknown_topic_or_partition)
                plog.append(buf, rb.iter_batches(buf), leader_epoch=0)
                self._purgatory.notify((topic, partition))
            else:
                part, error = replicas.leader_partition(topic, partition)
                if part is None:
                    raise NotLeaderError(topic, partition, E(error))
                plog = part.log
                plog.append(buf, rb.iter_batches(buf), leader_epoch=part.leader_epoch)
                self._purgatory.notify((topic, partition))
                replicas.appended(part)
                waits.append((part, plog.log_end_offset, {"error_code": E.none}))
            flush_due.append(plog.needs_flush())
            if on_appended is not None:
                on_appended(topic, partition)
        if not waits:
            return [AppendResult(E.none, due) for due in flush_due]
        assert replicas is not None
        await replicas.wait_for_acks(waits, timeout_s, {})
        return [AppendResult(E(result["error_code"]), due)
                for (_part, _end, result), due in zip(waits, flush_due, strict=True)]

    async def flush(self, partitions: Sequence[tuple[str, int]]) -> None:
        logs = [plog for topic, partition in partitions
                if (plog := self._log_manager.get_log(topic, partition)) is not None]
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in logs))

    def local_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._log_manager.get_log(topic, partition)

    def producer_epoch(self, topic: str, partition: int, producer_id: int) -> int | None:
        if self._replicas is None:
            plog = self._log_manager.get_log(topic, partition)
        else:
            part, _error = self._replicas.leader_partition(topic, partition)
            plog = part.log if part is not None else None
        entry = plog.producer_state.producers.get(producer_id) if plog is not None else None
        return entry.producer_epoch if entry is not None else None

    def partition_count(self, topic: str) -> int | None:
        found = self._metadata.get_topic(topic)
        return int(found.partitions) if found is not None else None

    def ensure_topic(self, topic: str, partitions: int, replication_factor: int, configs: Mapping[str, str]) -> bool:
        # A single broker makes it with one replica whatever the setting says.
        rf = replication_factor if self._replicas is not None else 1
        return self._ensure_internal(topic, partitions, rf, dict(configs))

    async def follow_leadership(self, topic: str, listener: LeadershipListener) -> None:
        replicas = self._replicas
        if replicas is None:
            await listener.leads_every_partition()  # a single broker leads them all, for good
            return

        def changed(changed_topic: str, partition: int, leader_epoch: int) -> None:
            """From the replica manager: this broker leads ``partition`` at ``leader_epoch`` (>= 0),
            or no longer leads it (-1)."""
            if changed_topic != topic:
                return
            if leader_epoch < 0:
                listener.resigned(partition)
            else:
                listener.became_leader(partition, leader_epoch)

        replicas.leadership_listeners.append(changed)
        for part in list(replicas.partitions.values()):
            if part.topic == topic and part.is_leader:
                changed(part.topic, part.partition, part.leader_epoch)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._spawn(coro)
