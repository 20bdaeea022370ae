"""A consumer-protocol group (KIP-848) in a cluster: when its coordinator is SIGKILLed, the new leader of
its __consumer_offsets partition reads the group back, and the members carry on with the same member
ids, epochs and partitions, nothing revoked, every record consumed once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from clusterproc import SESSION_TIMEOUT_MS, Cluster
from conftest import unique
from helpers import RawConnection, confluent_produce, request_class
from test_groups_common import poll_all
from test_groups_consumer_protocol import CG_DESCRIBE, Member

from strom.coordinator.records import partition_for
from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(240)

Described = dict[str, tuple[str, int, tuple[int, ...]]]  # client id -> (member id, epoch, partitions)


def describe(bootstrap: str, group: str) -> tuple[E, int, Described]:
    """ConsumerGroupDescribe at one broker: (error, group epoch, the members)."""
    with RawConnection(bootstrap) as conn:
        d = conn.request(CG_DESCRIBE, 1, request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
    return E(d.error_code), d.group_epoch, {
        m.client_id: (m.member_id, m.member_epoch,
                      tuple(sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)))
        for m in d.members}


class Tally:
    """Records seen, each committed before the next is taken (again while the coordinator moves)."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.seen: Counter[bytes] = Counter()

    def __call__(self, i: int, msg: Any) -> None:
        from confluent_kafka import KafkaError, KafkaException

        moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.STALE_MEMBER_EPOCH, KafkaError._TRANSPORT,
                  KafkaError.REQUEST_TIMED_OUT}
        self.seen[msg.value()] += 1
        deadline = time.monotonic() + 60
        while True:
            try:
                self.members[i].consumer.commit(message=msg, asynchronous=False)
                return
            except KafkaException as e:
                error = e.args[0]
                if (error.code() not in moving and not error.retriable()) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the client finds the new coordinator, or learns its new epoch


def test_a_consumer_group_moves_with_its_coordinator(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = unique("cgk"), unique("cgk")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(30)
    cluster.settle([topic])
    confluent_produce(cluster.bootstrap, topic, [{"value": b"a%03d" % i, "partition": i % 6} for i in range(60)],
                      {"acks": "all"})
    members = [Member(cluster.bootstrap, group, topic, f"m{i}", **{"socket.timeout.ms": 6000}) for i in range(2)]
    tally = Tally(members)
    try:
        poll_all(members, lambda: sorted(len(m.owned) for m in members) == [3, 3] and len(tally.seen) >= 60, 90,
                 tally, "two members with 3 partitions each, 60 records")
        offsets_partition = partition_for(group, 3)  # made by the members' FindCoordinator
        coordinator = cluster.wait_leader("__consumer_offsets", offsets_partition)
        error, epoch, before = describe(cluster.brokers[coordinator].bootstrap, group)
        assert error is E.none and {c: a for c, (_i, _e, a) in before.items()} == {
            m.name: tuple(sorted(m.owned)) for m in members}
        owned = [set(m.owned) for m in members]
        revoked = [list(m.revoked) for m in members]

        cluster.brokers[coordinator].kill()
        successor = cluster.wait_leader("__consumer_offsets", offsets_partition, not_in={coordinator},
                                        timeout=SESSION_TIMEOUT_MS / 1000 + 15)
        cluster.brokers[successor].wait_for_log(f"loaded consumer group {group} with 2 members", timeout=30)
        # The new coordinator serves the group as it was: same members, epochs, partitions.
        assert describe(cluster.brokers[successor].bootstrap, group) == (E.none, epoch, before)

        confluent_produce(cluster.bootstrap, topic, [{"value": b"b%03d" % i, "partition": i % 6} for i in range(60)],
                          {"acks": "all"})
        poll_all(members, lambda: len(tally.seen) >= 120, 90, tally, "120 records after the move")
        # The members have heartbeat to the new coordinator all along without rejoining.
        assert describe(cluster.brokers[successor].bootstrap, group) == (E.none, epoch, before)
        assert [m.owned for m in members] == owned
        assert [m.revoked for m in members] == revoked
    finally:
        for m in members:
            m.close()
        cluster.ensure_all_up()
    assert max(tally.seen.values()) == 1
    assert set(tally.seen) == {b"a%03d" % i for i in range(60)} | {b"b%03d" % i for i in range(60)}
