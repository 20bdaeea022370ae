"""One broker is a one-node cluster: min.insync.replicas, the high watermark and leader epochs mean
on it what they mean in a cluster (the same replica manager serves both)."""

from __future__ import annotations

from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, request_class, values_batch, wait_until

from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(120)


def test_acks_all_needs_min_insync_replicas_on_one_broker(module_broker: BrokerProcess) -> None:
    """A topic with min.insync.replicas=2 on one broker: the ISR (this broker) is too small, so an
    acks=all write is refused with NOT_ENOUGH_REPLICAS and nothing is written, while acks=1 and
    acks=0 writes are served, as Kafka does. A client sees the same (confluent-kafka, no retries)."""
    from confluent_kafka import Producer

    topic = "one-node-min-isr"
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic(topic, 1, {"min.insync.replicas": "2"}).error_code) == 0
        refused = conn.produce(topic, 0, values_batch([b"refused"]), acks=-1)
        assert int(refused.error_code) == E.not_enough_replicas, refused
        assert int(refused.base_offset) == -1
        assert conn.log_end_offset(topic, 0) == 0  # nothing was appended
        served = conn.produce(topic, 0, values_batch([b"one"]), acks=1)
        assert int(served.error_code) == 0 and int(served.base_offset) == 0, served
        assert [r.value for r in conn.fetch_records(topic, 0)] == [b"one"]

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "acks": "all", "retries": 0,
                         "message.timeout.ms": 10_000})
    producer.produce(topic, b"client", on_delivery=lambda err, msg: errors.append(err.name() if err else "OK"))
    assert producer.flush(15) == 0
    assert errors == ["NOT_ENOUGH_REPLICAS"]


def test_min_insync_replicas_one_accepts_acks_all(module_broker: BrokerProcess) -> None:
    """The default (1) and a topic lowered back to it: acks=all is acknowledged, the high watermark
    is the log end at once (the ISR is this broker alone)."""
    topic = "one-node-acks-all"
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic(topic, 1).error_code) == 0
        r = conn.produce(topic, 0, values_batch([b"a", b"b", b"c"]), acks=-1)
        assert int(r.error_code) == 0 and int(r.base_offset) == 0, r
        p = conn.fetch(topic, 0, 0)
        assert int(p.high_watermark) == 3 and int(p.last_stable_offset) == 3


def _offset_for_leader_epoch(conn: RawConnection, topic: str, epoch: int, current: int = -1) -> Any:
    req = request_class("offset_for_leader_epoch", 4, "OffsetForLeaderEpochRequest")
    ot = request_class("offset_for_leader_epoch", 4, "OffsetForLeaderTopic")
    op = request_class("offset_for_leader_epoch", 4, "OffsetForLeaderPartition")
    body = req(replica_id=-1, topics=(ot(topic=topic, partitions=(
        op(partition=0, current_leader_epoch=current, leader_epoch=epoch),)),))
    ((p,),) = (t.partitions for t in conn.request(23, 4, body).topics)
    return p


def test_one_broker_leads_at_epoch_zero(module_broker: BrokerProcess) -> None:
    """Metadata names this broker leader at epoch 0 with itself the only replica and the ISR; the
    epoch is known before anything is written (OffsetForLeaderEpoch answers the log end), and a
    client that claims a newer epoch is told UNKNOWN_LEADER_EPOCH, as a cluster's leader tells it."""
    topic = "one-node-epoch"
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic(topic, 1).error_code) == 0
        md = conn.metadata([topic])
        ((p,),) = (t.partitions for t in md.topics)
        node = int(md.brokers[0].node_id)
        assert (int(p.leader_id), int(p.leader_epoch)) == (node, 0)
        assert list(p.replica_nodes) == [node] and list(p.isr_nodes) == [node]
        empty = _offset_for_leader_epoch(conn, topic, 0)
        assert (int(empty.error_code), int(empty.leader_epoch), int(empty.end_offset)) == (0, 0, 0)
        conn.produce(topic, 0, values_batch([b"x", b"y"]), acks=1)
        wait_until(lambda: conn.log_end_offset(topic, 0) == 2, 10, what="two records")
        answer = _offset_for_leader_epoch(conn, topic, 0)
        assert (int(answer.leader_epoch), int(answer.end_offset)) == (0, 2)
        newer = _offset_for_leader_epoch(conn, topic, 0, current=1)
        assert int(newer.error_code) == E.unknown_leader_epoch
