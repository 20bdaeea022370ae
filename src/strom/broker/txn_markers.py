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
from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.runtime_io import Wait, append_batch, wait_replicated
from strom.protocol.errors import ErrorCode as E
from strom.records.control import build_marker_batch
from strom.storage.log import wall_clock_ms

if TYPE_CHECKING:
    from strom.broker.server import Broker

log = logging.getLogger("strom.transactions")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
_REQUEST_TIMEOUT_S = 30.0
TopicPartition = tuple[str, int]


async def append_markers(broker: Broker, producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
    """Append the marker to each partition this broker leads; answered once the ISR has them."""
    results: dict[TopicPartition, E] = {}
    waits: list[tuple[TopicPartition, Wait]] = []
    for tp in partitions:
        topic, partition = tp
        batch = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, wall_clock_ms()))
        plog, error, _epoch = broker.leader_log(topic, partition)
        if plog is None:
            results[tp] = E(error)
            continue
        try:
            _plog, wait = append_batch(broker, topic, partition, batch)
        except Exception as e:  # a full disk, a closed log: the coordinator retries
            log.warning("could not write a marker to %s-%d: %s", topic, partition, e)
            results[tp] = E.kafka_storage_error
            continue
        results[tp] = E.none
        if wait is not None:
            waits.append((tp, wait))
        if topic == GROUP_METADATA_TOPIC_NAME:
            coordinator = getattr(broker, "group_coordinator", None)
            if coordinator is not None:
                coordinator.on_txn_marker(partition, producer_id, commit)
    if waits:
        error = await wait_replicated(broker, [w for _, w in waits], _REQUEST_TIMEOUT_S)
        if error is not E.none:
            for tp, (_part, _end, result) in waits:
                if result["error_code"] != E.none:
                    results[tp] = E(result["error_code"])
    return results


async def write_markers(broker: Broker, producer_id: int, producer_epoch: int, commit: bool,
                        coordinator_epoch: int, partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
    """Write the marker to every partition, wherever its leader is; the error per partition."""
    local: list[TopicPartition] = []
    remote: dict[int, list[TopicPartition]] = defaultdict(list)
    results: dict[TopicPartition, E] = {}
    cluster = broker.cluster
    for tp in partitions:
        if cluster is None:
            local.append(tp)
            continue
        state = cluster.store.state(*tp)
        if state is None:
            results[tp] = E.unknown_topic_or_partition
        elif state.leader == broker.config.broker_id:
            local.append(tp)
        elif state.leader < 0:
            results[tp] = E.not_leader_or_follower
        else:
            remote[state.leader].append(tp)
    jobs: list[Any] = [append_markers(broker, producer_id, producer_epoch, commit, coordinator_epoch, local)]
    jobs += [_send(broker, leader, producer_id, producer_epoch, commit, coordinator_epoch, tps)
             for leader, tps in remote.items()]
    for found in await asyncio.gather(*jobs):
        results.update(found)
    return results


async def _send(broker: Broker, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                coordinator_epoch: int, partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
    from kio.schema.types import ProducerId, TopicName
    from kio.schema.write_txn_markers.v1 import request as req
    from kio.static.primitive import i16, i32

    from strom.cluster.client import BrokerConnection

    assert broker.cluster is not None
    reg = broker.cluster.store.brokers.get(leader)
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
    host, port = reg.address_for(broker.config.inter_broker_listener_name or "")
    conn = BrokerConnection(host, port, f"strom-txn-markers-{broker.config.broker_id}", _REQUEST_TIMEOUT_S)
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
