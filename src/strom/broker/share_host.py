"""The broker's side of the share partition manager (strom.share.manager): the ``ShareHost`` over
the replica manager, the metadata and the purgatory, and the persister (Kafka's Persister) over the
share coordinators: local on a broker of its own (``LocalPersister``); in a cluster
(``ClusterPersister``) a share partition's state is read and written at the share coordinator of
its key, wherever that is: by the partition's leader with ReadShareGroupState (84) /
WriteShareGroupState (85), by the group coordinator's admin APIs with InitializeShareGroupState (83),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87). ``PartitionEndOffsets`` asks a
partition's leader for its end offset (ListOffsets), for the lag DescribeShareGroupOffsets answers
(Kafka's NetworkPartitionMetadataClient)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.cluster.client import BrokerConnection
from strom.coordinator.config import SHARE_GROUP_STATE_TOPIC_NAME
from strom.coordinator.share_runtime import ShareStateSummary
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

LIST_OFFSETS = 2
INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
READ_SHARE_GROUP_STATE_SUMMARY = 87


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
                          start_offset: int, batches: Sequence[StateBatch], state_epoch: int = 0) -> E:
        return await self._runtime.write_state(
            group_id, topic_id, partition, leader_epoch, start_offset,
            [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches],
            state_epoch)

    async def read_summary(self, group_id: str, topic_id: uuid.UUID,
                           partition: int) -> tuple[E, ShareStateSummary | None]:
        return self._runtime.read_summary(group_id, topic_id, partition)

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                               start_offset: int) -> E:
        return await self._runtime.initialize_state(group_id, topic_id, partition, start_offset, state_epoch)

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> E:
        return await self._runtime.delete_state(group_id, topic_id, partition)

    def close(self) -> None:
        pass


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
    state_epoch: int = 0


class BrokerPool:
    """A few idle connections per broker over the inter-broker listener (with its TLS and SASL)."""

    def __init__(self, store: ZkMetadataStore, broker_id: int, listener: str | None, security: ClientSecurity,
                 client_id: str) -> None:
        self._store = store
        self._listener = listener or ""
        self._security = security
        self._client_id = client_id
        self._idle: dict[int, list[BrokerConnection]] = {}

    async def request(self, broker: int, api_key: int, version: int, body: Any) -> Any:
        """One request to ``broker``; None when it could not be reached."""
        reg = self._store.brokers.get(broker)
        if reg is None:
            return None
        idle = self._idle.setdefault(broker, [])
        if idle:
            conn = idle.pop()
        else:
            host, port = reg.address_for(self._listener)
            conn = BrokerConnection(host, port, self._client_id, 10.0, self._security)
        try:
            response = await conn.request(api_key, version, body)
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("request %d to broker %d failed: %r", api_key, broker, e)
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

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


class ClusterPersister:
    """The persister of a broker in a cluster (Kafka's DefaultStatePersister): a share partition's
    state is kept by the share coordinator of its key ("group:topicId:partition"), the leader of
    that key's partition of __share_group_state. On this broker the call is local; on another it
    is a request over the inter-broker listener: Read/WriteShareGroupState (84, 85) for the share
    partition's leader, Initialize/DeleteShareGroupState (83, 86) and ReadShareGroupStateSummary
    (87) for the group coordinator's admin APIs. A coordinator that moves, loads or dies is found
    again and the call retried, within ``timeout_s``."""

    def __init__(self, runtime: ShareCoordinatorRuntime, store: ZkMetadataStore, broker_id: int,
                 listener: str | None, security: ClientSecurity, timeout_s: float = 30.0) -> None:
        self._local = LocalPersister(runtime)
        self._runtime = runtime
        self._store = store
        self._broker_id = broker_id
        self._timeout_s = timeout_s
        self.pool = BrokerPool(store, broker_id, listener, security, f"strom-share-{broker_id}")

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
                          start_offset: int, batches: Sequence[StateBatch], state_epoch: int = 0) -> E:
        async def once(coordinator: int) -> tuple[E, None]:
            if coordinator == self._broker_id:
                return await self._local.write_state(group_id, topic_id, partition, leader_epoch, start_offset,
                                                     batches, state_epoch), None
            return await self._write_remote(coordinator, group_id, topic_id, partition, leader_epoch,
                                            start_offset, batches, state_epoch), None

        error, _ = await self._retrying(group_id, topic_id, partition, once, (E.coordinator_not_available, None))
        return error

    async def read_summary(self, group_id: str, topic_id: uuid.UUID,
                           partition: int) -> tuple[E, ShareStateSummary | None]:
        async def once(coordinator: int) -> tuple[E, ShareStateSummary | None]:
            if coordinator == self._broker_id:
                return await self._local.read_summary(group_id, topic_id, partition)
            return await self._summary_remote(coordinator, group_id, topic_id, partition)

        return await self._retrying(group_id, topic_id, partition, once, (E.coordinator_not_available, None))

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                               start_offset: int) -> E:
        async def once(coordinator: int) -> tuple[E, None]:
            if coordinator == self._broker_id:
                return await self._local.initialize_state(group_id, topic_id, partition, state_epoch,
                                                          start_offset), None
            from kio.schema.initialize_share_group_state.v0 import request as req
            from kio.static.primitive import i32, i64

            body = req.InitializeShareGroupStateRequest(group_id=group_id, topics=(req.InitializeStateData(
                topic_id=topic_id, partitions=(req.PartitionData(
                    partition=i32(partition), state_epoch=i32(state_epoch), start_offset=i64(start_offset)),)),))
            return await self._partition_error(coordinator, INITIALIZE_SHARE_GROUP_STATE, 0, body, topic_id,
                                               partition), None

        error, _ = await self._retrying(group_id, topic_id, partition, once, (E.coordinator_not_available, None))
        return error

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> E:
        async def once(coordinator: int) -> tuple[E, None]:
            if coordinator == self._broker_id:
                return await self._local.delete_state(group_id, topic_id, partition), None
            from kio.schema.delete_share_group_state.v0 import request as req
            from kio.static.primitive import i32

            body = req.DeleteShareGroupStateRequest(group_id=group_id, topics=(req.DeleteStateData(
                topic_id=topic_id, partitions=(req.PartitionData(partition=i32(partition)),)),))
            return await self._partition_error(coordinator, DELETE_SHARE_GROUP_STATE, 0, body, topic_id,
                                               partition), None

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

    async def _partition_error(self, coordinator: int, api_key: int, version: int, body: Any, topic_id: uuid.UUID,
                               partition: int) -> E:
        """The error of a request about one share partition whose answer is results -> partitions."""
        response = await self.pool.request(coordinator, api_key, version, body)
        if response is None:
            return E.coordinator_not_available
        for t in response.results:
            for p in t.partitions:
                if t.topic_id == topic_id and p.partition == partition:
                    return E(p.error_code)
        return E.unknown_server_error

    async def _read_remote(self, coordinator: int, group_id: str, topic_id: uuid.UUID, partition: int,
                           leader_epoch: int) -> tuple[E, PersistedState | None]:
        from kio.schema.read_share_group_state.v0 import request as req
        from kio.static.primitive import i32

        body = req.ReadShareGroupStateRequest(group_id=group_id, topics=(req.ReadStateData(
            topic_id=topic_id, partitions=(req.PartitionData(partition=i32(partition),
                                                             leader_epoch=i32(leader_epoch)),)),))
        response = await self.pool.request(coordinator, READ_SHARE_GROUP_STATE, 0, body)
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
                        for b in p.state_batches), p.state_epoch)
        return E.unknown_server_error, None

    async def _write_remote(self, coordinator: int, group_id: str, topic_id: uuid.UUID, partition: int,
                            leader_epoch: int, start_offset: int, batches: Sequence[StateBatch],
                            state_epoch: int) -> E:
        from kio.schema.write_share_group_state.v1 import request as req
        from kio.static.primitive import i8, i16, i32, i64

        body = req.WriteShareGroupStateRequest(group_id=group_id, topics=(req.WriteStateData(
            topic_id=topic_id, partitions=(req.PartitionData(
                partition=i32(partition), state_epoch=i32(state_epoch), leader_epoch=i32(leader_epoch),
                start_offset=i64(start_offset), state_batches=tuple(
                    req.StateBatch(first_offset=i64(b.first_offset), last_offset=i64(b.last_offset),
                                   delivery_state=i8(b.delivery_state), delivery_count=i16(b.delivery_count))
                    for b in batches)),)),))
        return await self._partition_error(coordinator, WRITE_SHARE_GROUP_STATE, 1, body, topic_id, partition)

    async def _summary_remote(self, coordinator: int, group_id: str, topic_id: uuid.UUID,
                              partition: int) -> tuple[E, ShareStateSummary | None]:
        from kio.schema.read_share_group_state_summary.v1 import request as req
        from kio.static.primitive import i32

        body = req.ReadShareGroupStateSummaryRequest(group_id=group_id, topics=(req.ReadStateSummaryData(
            topic_id=topic_id, partitions=(req.PartitionData(partition=i32(partition), leader_epoch=i32(-1)),)),))
        response = await self.pool.request(coordinator, READ_SHARE_GROUP_STATE_SUMMARY, 1, body)
        if response is None:
            return E.coordinator_not_available, None
        for t in response.results:
            for p in t.partitions:
                if t.topic_id == topic_id and p.partition == partition:
                    error = E(p.error_code)
                    if error is not E.none:
                        return error, None
                    if p.start_offset < 0:
                        return E.none, None  # no state
                    return E.none, ShareStateSummary(p.state_epoch, p.leader_epoch, p.start_offset,
                                                     p.delivery_complete_count)
        return E.unknown_server_error, None

    def close(self) -> None:
        self.pool.close()


class PartitionEndOffsets:
    """A partition's end offset (high watermark) as its leader answers ListOffsets for the latest
    offset (Kafka's NetworkPartitionMetadataClient.listLatestOffsets), for the lag of
    DescribeShareGroupOffsets: read here when this broker leads it, else asked over the
    inter-broker listener. (error, offset)."""

    def __init__(self, replicas: ReplicaManager, store: ZkMetadataStore | None, broker_id: int,
                 pool: BrokerPool | None) -> None:
        self._replicas = replicas
        self._store = store
        self._broker_id = broker_id
        self._pool = pool

    async def latest_offset(self, topic: str, partition: int) -> tuple[E, int]:
        plog, error, _epoch = self._replicas.leader_log(topic, partition)
        if plog is not None:
            return E.none, plog.high_watermark
        state = self._store.state(topic, partition) if self._store is not None else None
        leader = state.leader if state is not None else -1
        if self._pool is None or leader < 0 or leader == self._broker_id:
            return (E(error) if error else E.leader_not_available), -1
        from kio.schema.list_offsets.v7 import request as req
        from kio.schema.types import BrokerId, TopicName
        from kio.static.primitive import i8, i32, i64

        body = req.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
            req.ListOffsetsTopic(name=TopicName(topic), partitions=(req.ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),))
        response = await self._pool.request(leader, LIST_OFFSETS, 7, body)
        if response is None:
            return E.leader_not_available, -1
        for t in response.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    return E(p.error_code), int(p.offset)
        return E.unknown_server_error, -1
