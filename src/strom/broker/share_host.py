"""The broker's side of the share partition manager (strom.share.manager): the ``ShareHost`` over
the replica manager, the metadata and the purgatory, and the ``Persister`` over this broker's share
coordinator: local on a broker of its own (``LocalPersister``); in a cluster (``ClusterPersister``)
the share partition's leader reads and writes its state at the share coordinator of its key,
wherever that is, with ReadShareGroupState / WriteShareGroupState."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.cluster.client import BrokerConnection
from strom.coordinator.config import SHARE_GROUP_STATE_TOPIC_NAME
from strom.coordinator.share_state_records import PersistedBatch
from strom.protocol.errors import ErrorCode as E
from strom.share.manager import LeaderLog, PersistedState
from strom.share.share_partition import StateBatch

if TYPE_CHECKING:
    from strom.cluster.metadata import MetadataStore
    from strom.cluster.zk_store import ZkMetadataStore
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime
    from strom.replication.purgatory import Purgatory
    from strom.replication.replica_manager import ReplicaManager
    from strom.security.client import ClientSecurity

log = logging.getLogger("strom.share")

READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85


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
    """The share coordinator of this broker as the share partitions' persister (a broker on its own)."""

    def __init__(self, runtime: ShareCoordinatorRuntime) -> None:
        self._runtime = runtime

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> tuple[E, PersistedState | None]:
        return await self._runtime.read_state(group_id, topic_id, partition, leader_epoch)

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch]) -> E:
        return await self._runtime.write_state(
            group_id, topic_id, partition, leader_epoch, start_offset,
            [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches])


# What the persister retries: the coordinator moving or loading, its broker gone (Kafka's
# PersisterStateManager retries these with a backoff, finding the coordinator again each time).
_RETRIABLE = frozenset({E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress,
                        E.request_timed_out, E.not_leader_or_follower})
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
_MAX_IDLE_CONNECTIONS = 4


@dataclass(frozen=True, slots=True)
class RemoteState:
    start_offset: int
    batches: tuple[PersistedBatch, ...]


class ClusterPersister:
    """The persister of a broker in a cluster (Kafka's DefaultStatePersister): a share partition's
    state is kept by the share coordinator of its key ("group:topicId:partition"), the leader of
    that key's partition of __share_group_state. On this broker the call is local; on another it
    is a ReadShareGroupState (84) / WriteShareGroupState (85) over the inter-broker listener. A
    coordinator that moves, loads or dies is found again and the call retried, within
    ``timeout_s``."""

    def __init__(self, runtime: ShareCoordinatorRuntime, store: ZkMetadataStore, broker_id: int,
                 listener: str | None, security: ClientSecurity, timeout_s: float = 30.0) -> None:
        self._local = LocalPersister(runtime)
        self._runtime = runtime
        self._store = store
        self._broker_id = broker_id
        self._listener = listener or ""
        self._security = security
        self._timeout_s = timeout_s
        self._idle: dict[int, list[BrokerConnection]] = {}

    def coordinator_of(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """The broker coordinating the share partition's state, -1 when none is known (the topic
        not made yet, or its partition without a leader)."""
        state_partition = self._runtime.state_partition(group_id, topic_id, partition)
        if state_partition is None:
            return -1
        state = self._store.state(SHARE_GROUP_STATE_TOPIC_NAME, state_partition)
        return state.leader if state is not None and state.leader >= 0 else -1

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> tuple[E, PersistedState | None]:
        async def once(coordinator: int) -> tuple[E, PersistedState | None]:
            if coordinator == self._broker_id:
                return await self._local.read_state(group_id, topic_id, partition, leader_epoch)
            return await self._read_remote(coordinator, group_id, topic_id, partition, leader_epoch)

        return await self._retrying(group_id, topic_id, partition, once, (E.coordinator_not_available, None))

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                          start_offset: int, batches: Sequence[StateBatch]) -> E:
        async def once(coordinator: int) -> tuple[E, None]:
            if coordinator == self._broker_id:
                return await self._local.write_state(group_id, topic_id, partition, leader_epoch, start_offset,
                                                     batches), None
            return await self._write_remote(coordinator, group_id, topic_id, partition, leader_epoch,
                                            start_offset, batches), None

        error, _ = await self._retrying(group_id, topic_id, partition, once, (E.coordinator_not_available, None))
        return error

    async def _retrying(self, group_id: str, topic_id: uuid.UUID, partition: int,
                        once: Callable[[int], Awaitable[tuple[E, Any]]], unavailable: tuple[E, Any]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        attempt = 0
        result = unavailable
        while True:
            coordinator = self.coordinator_of(group_id, topic_id, partition)
            if coordinator >= 0:
                result = await once(coordinator)
                if result[0] not in _RETRIABLE:
                    return result
            else:
                result = unavailable
            if loop.time() >= deadline:
                log.warning("share group %s: the share coordinator of %s:%d did not answer within %.0f s (%s)",
                            group_id, topic_id, partition, self._timeout_s, result[0].name)
                return result
            await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            attempt += 1

    # ---- over the network ---------------------------------------------------------------------

    async def _request(self, coordinator: int, api_key: int, version: int, body: Any) -> Any:
        """One request to the coordinator's broker; None when it could not be reached."""
        reg = self._store.brokers.get(coordinator)
        if reg is None:
            return None
        idle = self._idle.setdefault(coordinator, [])
        if idle:
            conn = idle.pop()
        else:
            host, port = reg.address_for(self._listener)
            conn = BrokerConnection(host, port, f"strom-share-{self._broker_id}", 10.0, self._security)
        try:
            response = await conn.request(api_key, version, body)
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("share state request %d to broker %d failed: %r", api_key, coordinator, e)
            conn.close()
            return None
        except BaseException:
            conn.close()
            raise
        if len(idle) < _MAX_IDLE_CONNECTIONS:
            idle.append(conn)
        else:
            conn.close()
        return response

    async def _read_remote(self, coordinator: int, group_id: str, topic_id: uuid.UUID, partition: int,
                           leader_epoch: int) -> tuple[E, PersistedState | None]:
        from kio.schema.read_share_group_state.v0 import request as req
        from kio.static.primitive import i32

        body = req.ReadShareGroupStateRequest(group_id=group_id, topics=(req.ReadStateData(
            topic_id=topic_id, partitions=(req.PartitionData(partition=i32(partition),
                                                             leader_epoch=i32(leader_epoch)),)),))
        response = await self._request(coordinator, READ_SHARE_GROUP_STATE, 0, body)
        if response is None:
            return E.coordinator_not_available, None
        for t in response.results:
            for p in t.partitions:
                if t.topic_id == topic_id and p.partition == partition:
                    error = E(p.error_code)
                    if error is not E.none:
                        return error, None
                    if p.start_offset < 0 and not p.state_batches:
                        return E.none, None  # nothing written yet
                    return E.none, RemoteState(p.start_offset, tuple(
                        PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in p.state_batches))
        return E.unknown_server_error, None

    async def _write_remote(self, coordinator: int, group_id: str, topic_id: uuid.UUID, partition: int,
                            leader_epoch: int, start_offset: int, batches: Sequence[StateBatch]) -> E:
        from kio.schema.write_share_group_state.v1 import request as req
        from kio.static.primitive import i8, i16, i32, i64

        body = req.WriteShareGroupStateRequest(group_id=group_id, topics=(req.WriteStateData(
            topic_id=topic_id, partitions=(req.PartitionData(
                partition=i32(partition), state_epoch=i32(0), leader_epoch=i32(leader_epoch),
                start_offset=i64(start_offset), state_batches=tuple(
                    req.StateBatch(first_offset=i64(b.first_offset), last_offset=i64(b.last_offset),
                                   delivery_state=i8(b.delivery_state), delivery_count=i16(b.delivery_count))
                    for b in batches)),)),))
        response = await self._request(coordinator, WRITE_SHARE_GROUP_STATE, 1, body)
        if response is None:
            return E.coordinator_not_available
        for t in response.results:
            for p in t.partitions:
                if t.topic_id == topic_id and p.partition == partition:
                    return E(p.error_code)
        return E.unknown_server_error

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
