"""num.replica.fetchers: a follower copies from each leader over that many fetchers, each with its
own connection and its share of the partitions, and the replicas still end up identical."""

from __future__ import annotations

import pytest
from clusterproc import Cluster, wait_replicas_identical
from conftest import unique
from helpers import confluent_produce, remote_ports, wait_until

from strom.replication.replica_manager import fetcher_index

pytestmark = pytest.mark.timeout(180)
FETCHERS = 3
CLUSTER_OVERRIDES = {"num.replica.fetchers": str(FETCHERS)}


def test_followers_use_several_fetchers_per_leader(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("fetchers")
    partitions = 6
    assert len({fetcher_index(topic, p, FETCHERS) for p in range(partitions)}) == FETCHERS  # all get work
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replica_assignment=[[1, 2, 3]] * partitions)])[topic].result(30)
    cluster.wait_full_isr(topic, partitions)
    records = [{"value": b"v%d-%d" % (p, i), "partition": p} for i in range(50) for p in range(partitions)]
    assert len(confluent_produce(cluster.bootstrap, topic, records, {"acks": "all"})) == len(records)
    wait_replicas_identical(cluster, topic, partitions)
    leader_port = cluster.brokers[1].port
    for follower in (2, 3):
        pid = cluster.brokers[follower].proc.pid
        wait_until(lambda pid=pid: remote_ports(pid).count(leader_port) == FETCHERS, 15, interval=0.2,
                   what=f"{FETCHERS} fetcher connections from broker {follower} to the leader")
