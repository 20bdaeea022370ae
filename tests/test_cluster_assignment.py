"""Replica placement (cluster.assignment) and the ZooKeeper documents (cluster.zk_layout)."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from strom.cluster import zk_layout as zl
from strom.cluster.assignment import AssignmentError, assign_replicas


def test_leaders_and_replicas_are_spread_evenly() -> None:
    brokers = {1: None, 2: None, 3: None, 4: None}
    plan = assign_replicas(brokers, 12, 3, rng=random.Random(7))
    assert sorted(plan) == list(range(12))
    assert all(len(set(r)) == 3 and set(r) <= set(brokers) for r in plan.values())
    assert Counter(r[0] for r in plan.values()) == {1: 3, 2: 3, 3: 3, 4: 3}  # leaders round-robin
    assert Counter(b for r in plan.values() for b in r) == {1: 9, 2: 9, 3: 9, 4: 9}


def test_more_partitions_continue_the_numbering() -> None:
    plan = assign_replicas({1: None, 2: None, 3: None}, 2, 2, first_partition=4, rng=random.Random(1))
    assert sorted(plan) == [4, 5]


def test_rack_aware_puts_replicas_in_different_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    plan = assign_replicas(brokers, 30, 3, rng=random.Random(3))
    for replicas in plan.values():
        assert len({brokers[b] for b in replicas}) == 3, replicas
    two_racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas(two_racks, 20, 3, rng=random.Random(5)).values():
        assert len(set(replicas)) == 3 and {two_racks[b] for b in replicas} == {"a", "b"}


def test_refusals() -> None:
    with pytest.raises(AssignmentError, match="larger than available brokers: 2"):
        assign_replicas({1: None, 2: None}, 1, 3)
    with pytest.raises(AssignmentError, match="rack information"):
        assign_replicas({1: "a", 2: None}, 1, 2)


def test_zookeeper_documents_round_trip_in_kafkas_shape() -> None:
    topic_id = uuid.uuid4()
    t = zl.TopicAssignment("orders", topic_id, {0: [1, 2], 1: [2, 3]}, {1: [3]}, {})
    raw = zl.encode_topic(t)
    assert b'"partitions":{"0":[1,2],"1":[2,3]}' in raw and b'"version":3' in raw
    assert zl.decode_topic("orders", raw) == t
    s = zl.PartitionState(2, 5, (2, 3), 4, zk_version=9)
    assert zl.decode_state(zl.encode_state(s), 9) == s
    assert zl.uuid_from_kafka(zl.uuid_to_kafka(topic_id)) == topic_id
    reg = zl.BrokerRegistration(1, "10.0.0.1", 9093, "r1", ("CLIENT://h:9092", "REPLICATION://10.0.0.1:9093"),
                                {"CLIENT": "PLAINTEXT", "REPLICATION": "PLAINTEXT"})
    back = zl.decode_broker(1, zl.encode_broker(reg), epoch=77)
    assert back.address_for("CLIENT") == ("h", 9092) and back.address_for("OTHER") == ("10.0.0.1", 9093)
    assert back.epoch == 77 and back.rack == "r1"
