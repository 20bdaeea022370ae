"""The broker's side of the coordinators' ``PartitionWriter`` (strom.coordinator.partition_writer):
how the group and transaction coordinators append to, read and follow the partitions of their
internal topics on this broker. Built and handed to them by broker/server.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from strom.coordinator.partition_writer import AppendResult, Batch, LeadershipListener, NotLeaderError
from strom.protocol.errors import ErrorCode as E
from strom.replication.leader_append import AppendOrigin

if TYPE_CHECKING:
    from strom.cluster.metadata import MetadataStore
    from strom.replication.partition import Partition
    from strom.replication.replica_manager import AppendEntry
    from strom.storage.log import PartitionLog
    from strom.storage.log_manager import LogManager

TopicPartition = tuple[str, int]


class Replicas(Protocol):
    """What the host uses of the replica manager (strom.replication.replica_manager)."""

    partitions: dict[TopicPartition, Partition]
    leadership_listeners: list[Callable[[str, int, int], None]]

    def leader_partition(self, topic: str, p: int, current_leader_epoch: int = -1) -> tuple[Partition | None, int]: ...

    def leader_log(self, topic: str, p: int, current_leader_epoch: int = -1) -> tuple[PartitionLog | None, int, int]: ...

    def append_records(self, acks: int, timeout_s: float, entries: Sequence[AppendEntry],
                       origin: AppendOrigin = AppendOrigin.CLIENT
                       ) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]: ...


class CoordinatorHost:
    """A ``PartitionWriter`` over this broker's replica manager. ``one_node``: a broker on its own,
    which leads every partition for good (the coordinators load everything before it serves)."""

    def __init__(self, replicas: Replicas, log_manager: LogManager, metadata: MetadataStore,
                 ensure_internal: Callable[[str, int, int, dict[str, str]], bool],
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]], *, one_node: bool) -> None:
        self._replicas = replicas
        self._log_manager = log_manager
        self._metadata = metadata
        self._ensure_internal = ensure_internal  # TopicManager.ensure_internal
        self._spawn = spawn
        self._one_node = one_node

    async def append(self, batches: Sequence[Batch], timeout_s: float,
                     on_appended: Callable[[str, int], None] | None = None) -> list[AppendResult]:
        """Append each batch as its partition's leader, then wait until the ISR has them all
        (acks=all). Raises before anything is written when this broker does not lead one of the
        partitions (NotLeaderError). ``on_appended(topic, partition)`` runs after the appends,
        before the wait.

        One call down to the replica manager, as a produce makes (``append_records``, with the
        coordinator as the origin: the batches are the broker's own); its group commit has
        fsynced what the logs' flush policy asked for before the wait ends.
        """
        replicas = self._replicas
        for topic, partition, _buf in batches:
            part, error = replicas.leader_partition(topic, partition)
            if part is None:
                raise NotLeaderError(topic, partition, E(error))
        outcome = replicas.append_records(-1, timeout_s, [(t, p, buf) for t, p, buf in batches],
                                          AppendOrigin.COORDINATOR)
        if on_appended is not None:
            for topic, partition, _buf in batches:
                on_appended(topic, partition)
        results = outcome if isinstance(outcome, list) else await outcome
        return [AppendResult(E(result["error_code"])) for result in results]

    def local_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._log_manager.get_log(topic, partition)

    def producer_epoch(self, topic: str, partition: int, producer_id: int) -> int | None:
        plog, _error, _epoch = self._replicas.leader_log(topic, partition)
        entry = plog.producer_state.producers.get(producer_id) if plog is not None else None
        return entry.producer_epoch if entry is not None else None

    def partition_count(self, topic: str) -> int | None:
        found = self._metadata.get_topic(topic)
        return int(found.partitions) if found is not None else None

    def ensure_topic(self, topic: str, partitions: int, replication_factor: int, configs: Mapping[str, str]) -> bool:
        # A single broker makes it with one replica whatever the setting says.
        rf = 1 if self._one_node else replication_factor
        configs = dict(configs)
        if "min.insync.replicas" in configs:
            # Never above the replicas it gets: a min.isr of 2 on one broker would refuse every write.
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        return self._ensure_internal(topic, partitions, rf, configs)

    async def follow_leadership(self, topic: str, listener: LeadershipListener) -> None:
        replicas = self._replicas
        if self._one_node:
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
