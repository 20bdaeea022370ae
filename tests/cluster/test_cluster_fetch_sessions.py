"""Followers fetch through fetch sessions (KIP-227): after the first full Fetch they name only the
partitions whose position changed, the leader answers only those with something to say, idle
partitions stay in the ISR all the same, and replication goes on across a leader change."""

from __future__ import annotations

import time

import pytest
from clusterproc import Cluster, wait_replicas_identical
from conftest import unique
from helpers import confluent_produce

pytestmark = pytest.mark.timeout(240)
LAG_MS = 1500
# A short replica.lag.time.max.ms: a follower whose idle partitions did not count as fetched would
# leave their ISR within it.
CLUSTER_OVERRIDES = {"replica.lag.time.max.ms": str(LAG_MS)}


def test_follower_sessions_keep_idle_partitions_in_sync_and_survive_a_leader_change(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("sessions")
    partitions = 40
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replica_assignment=[[1, 2, 3]] * partitions)])[topic].result(30)
    cluster.wait_full_isr(topic, partitions)
    first = [{"value": b"first-%d" % p, "partition": p} for p in range(partitions)]
    assert len(confluent_produce(cluster.bootstrap, topic, first, {"acks": "all"})) == partitions
    wait_replicas_identical(cluster, topic, partitions)

    # Idle for three times replica.lag.time.max.ms, a few partitions written now and then: every
    # ISR stays full (watched throughout, not only at the end).
    deadline = time.monotonic() + 3 * LAG_MS / 1000
    n = 0
    while time.monotonic() < deadline:
        p = (n * 7) % partitions
        confluent_produce(cluster.bootstrap, topic, [{"value": b"busy-%d" % n, "partition": p}], {"acks": "all"})
        n += 1
        for q in range(partitions):
            state = cluster.state(topic, q)
            assert state is not None and sorted(state.isr) == [1, 2, 3], f"{topic}-{q} ISR shrank: {state}"
    wait_replicas_identical(cluster, topic, partitions)

    # The leader goes: the followers fetch from the new one in new sessions; the old leader comes
    # back as a follower and catches up through its own.
    cluster.brokers[1].kill()
    new_leader = cluster.wait_leader(topic, 0, not_in={1})
    more = [{"value": b"after-%d" % p, "partition": p} for p in range(0, partitions, 5)]
    assert len(confluent_produce(cluster.bootstrap, topic, more, {"acks": "all"})) == len(more)
    cluster.start_broker(1, [topic])
    cluster.wait_full_isr(topic, partitions, timeout=60)
    wait_replicas_identical(cluster, topic, partitions)
    assert cluster.leader(topic, 0) in (new_leader, 1)
