"""A client that names a replica id in a Fetch is not taken for a follower by the leader unless that
broker is one of the partition's replicas (docs/security.md, "What strom defends against"; the
single-broker cases are in tests/test_fetch_hardening.py)."""

from __future__ import annotations

import pytest
from clusterproc import Cluster
from conftest import unique
from helpers import RawConnection, confluent_produce
from test_fetch_hardening import fetch, partitions

from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(180)


def test_a_fetch_naming_a_broker_that_is_not_a_replica_is_refused(cluster: Cluster) -> None:
    """Broker 3 holds no replica of the partition: a Fetch naming it, at the leader's log end or
    from the start, gets Kafka's error, reads nothing, and leaves the high watermark, the ISR and
    the partition state in ZooKeeper as they were; the real follower goes on copying."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("forged-follower")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(30)
    cluster.wait_full_isr(topic, 1)
    records = [{"value": b"v-%d" % i, "partition": 0} for i in range(20)]
    confluent_produce(cluster.bootstrap, topic, records, {"acks": "all"})
    before = cluster.state(topic, 0)
    assert before is not None and sorted(before.isr) == [1, 2]
    leader = before.leader
    with RawConnection(cluster.brokers[leader].bootstrap) as conn:
        hw = int(partitions(fetch(conn, topic, {0: 0}))[0].high_watermark)
        assert hw == 20
        for version, epoch, expected in ((12, -1, E.not_leader_or_follower),
                                         (12, before.leader_epoch, E.unknown_leader_epoch),
                                         (16, -1, E.not_leader_or_follower)):
            for replica_id in (3, leader):  # not a replica; the leader itself
                for offset in (hw, 0):
                    p = partitions(fetch(conn, topic, {0: offset}, version=version, replica_id=replica_id,
                                         leader_epoch=epoch))[0]
                    assert int(p.error_code) == expected, (version, replica_id, offset, p)
                    assert not p.records and p.high_watermark == -1, p
        assert int(partitions(fetch(conn, topic, {0: 0}))[0].high_watermark) == hw
    assert cluster.state(topic, 0) == before  # same leader, epoch, ISR and znode version
    # Replication goes on: acks=all needs the follower's fetches.
    more = [{"value": b"w-%d" % i, "partition": 0} for i in range(20)]
    confluent_produce(cluster.bootstrap, topic, more, {"acks": "all"})
    with RawConnection(cluster.brokers[leader].bootstrap) as conn:
        got = conn.fetch_records(topic, 0)
        assert [r.value for r in got] == [r["value"] for r in records + more]
    after = cluster.state(topic, 0)
    assert after is not None and sorted(after.isr) == [1, 2] and after.leader_epoch == before.leader_epoch
    assert all(b.alive() for b in cluster.brokers.values())
