"""Writing transaction markers (Kafka's TransactionMarkerChannelManager and the WriteTxnMarkers
handler's work): a COMMIT or ABORT control batch appended to each partition of a transaction.

Partitions this broker leads get the marker appended here; the others are sent to their leaders in
one WriteTxnMarkers request per broker. A marker on a __consumer_offsets partition also tells the
group coordinator to apply or drop the transaction's offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from strom.clock import now_ms
from strom.coordinator.group_runtime import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.partition_writer import AppendResult, Batch, NotLeaderError
from strom.protocol.errors import ErrorCode as E
from strom.records.control import build_marker_batch

if TYPE_CHECKING:
    from strom.cluster.zk_store import ZkMetadataStore

log = logging.getLogger("strom.transactions")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
_REQUEST_TIMEOUT_S = 30.0
TopicPartition = tuple[str, int]


class LeaderAppender(Protocol):
    """Appends as the partitions' leader and waits for the ISR (strom.broker.coordinator_host)."""

    async def append(self, batches: Sequence[Batch], timeout_s: float,
                     on_appended: Callable[[str, int], None] | None = None) -> list[AppendResult]: ...


class TxnMarkers:
    """``writer``: appends to partitions this broker leads; ``store``: the cluster's metadata (None on
    a single broker, which leads every partition); ``on_group_marker(partition, producer_id,
    commit)``: the group coordinator, told of a marker on a __consumer_offsets partition."""

    def __init__(self, writer: LeaderAppender, store: ZkMetadataStore | None, broker_id: int,
                 inter_broker_listener_name: str | None, on_group_marker: Callable[[int, int, bool], None]) -> None:
        self.writer = writer
        self.store = store
        self.broker_id = broker_id
        self.inter_broker_listener_name = inter_broker_listener_name
        self.on_group_marker = on_group_marker

    async def append_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                             partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        """Append the marker to each partition this broker leads; answered once the ISR has them."""

        def appended(topic: str, partition: int) -> None:
            if topic == GROUP_METADATA_TOPIC_NAME:
                self.on_group_marker(partition, producer_id, commit)

        async def append(tp: TopicPartition) -> E:
            topic, partition = tp
            batch = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                                 now_ms()))
            try:
                [result] = await self.writer.append([(topic, partition, batch)], _REQUEST_TIMEOUT_S, appended)
            except NotLeaderError as e:
                return e.error
            except Exception as e:  # a full disk, a closed log: the coordinator retries
                log.warning("could not write a marker to %s-%d: %s", topic, partition, e)
                return E.kafka_storage_error
            return result.error

        errors = await asyncio.gather(*(append(tp) for tp in partitions))
        return dict(zip(partitions, errors, strict=True))

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        """Write the marker to every partition, wherever its leader is; the error per partition."""
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = defaultdict(list)
        results: dict[TopicPartition, E] = {}
        store = self.store
        for tp in partitions:
            if store is None:
                local.append(tp)
                continue
            state = store.state(*tp)
            if state is None:
                results[tp] = E.unknown_topic_or_partition
            elif state.leader == self.broker_id:
                local.append(tp)
            elif state.leader < 0:
                results[tp] = E.not_leader_or_follower
            else:
                remote[state.leader].append(tp)
        jobs: list[Any] = [self.append_markers(producer_id, producer_epoch, commit, coordinator_epoch, local)]
        jobs += [self._send(leader, producer_id, producer_epoch, commit, coordinator_epoch, tps)
                 for leader, tps in remote.items()]
        for found in await asyncio.gather(*jobs):
            results.update(found)
        return results

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        from kio.schema.types import ProducerId, TopicName
        from kio.schema.write_txn_markers.v1 import request as req
        from kio.static.primitive import i16, i32

        from strom.cluster.client import BrokerConnection

        assert self.store is not None
        reg = self.store.brokers.get(leader)
        if reg is None:
            return dict.fromkeys(partitions, E.not_leader_or_follower)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append(partition)
        body = req.WriteTxnMarkersRequest(markers=(req.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch), transaction_result=commit,
            topics=tuple(req.WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                         for t, ps in by_topic.items()),
            coordinator_epoch=i32(coordinator_epoch)),))
        host, port = reg.address_for(self.inter_broker_listener_name or "")
        conn = BrokerConnection(host, port, f"strom-txn-markers-{self.broker_id}", _REQUEST_TIMEOUT_S)
        try:
            response = await conn.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(partitions, E.not_leader_or_follower)
        finally:
            conn.close()
        results: dict[TopicPartition, E] = {}
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    results[(t.name, p.partition_index)] = E(p.error_code)
        return {tp: results.get(tp, E.unknown_server_error) for tp in partitions}
