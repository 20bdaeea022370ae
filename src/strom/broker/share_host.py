"""The broker's side of the share partition manager (strom.share.manager): the ``ShareHost`` over
the replica manager, the metadata and the purgatory, and the ``Persister`` over this broker's share
coordinator (on one broker every share partition's state is local; in a cluster the leader would
send ReadShareGroupState / WriteShareGroupState to the coordinator of the state's partition)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from strom.coordinator.share_state_records import PersistedBatch
from strom.protocol.errors import ErrorCode as E
from strom.share.manager import LeaderLog, PersistedState
from strom.share.share_partition import StateBatch

if TYPE_CHECKING:
    from strom.cluster.metadata import MetadataStore
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime
    from strom.replication.purgatory import Purgatory
    from strom.replication.replica_manager import ReplicaManager


class BrokerShareHost:
    def __init__(self, replicas: ReplicaManager, metadata: MetadataStore, purgatory: Purgatory,
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]]) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._purgatory = purgatory
        self._spawn = spawn

    def leader_log(self, topic: str, partition: int) -> tuple[LeaderLog | None, int, int]:
        return self._replicas.leader_log(topic, partition)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self._metadata.topic_by_id(topic_id)
        return info.name if info is not None else None

    def wait(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> Awaitable[bool]:
        return self._purgatory.wait(keys, timeout_s)

    def notify(self, key: tuple[str, int]) -> None:
        self._purgatory.notify(key)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        return self._spawn(coro)


class LocalPersister:
    """The share coordinator of this broker as the share partitions' persister."""

    def __init__(self, runtime: ShareCoordinatorRuntime) -> None:
        self._runtime = runtime

    def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[E, PersistedState | None]:
        return self._runtime.read_state(group_id, topic_id, partition)

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch]) -> E:
        return await self._runtime.write_state(
            group_id, topic_id, partition, leader_epoch, start_offset,
            [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches])
