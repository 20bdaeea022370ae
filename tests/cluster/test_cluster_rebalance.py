"""auto.leader.rebalance.enable: the controller moves leaderships back to the preferred replicas
on its own, every leader.imbalance.check.interval.seconds."""

from __future__ import annotations

import pytest
from clusterproc import Cluster
from conftest import unique
from helpers import wait_until

pytestmark = pytest.mark.timeout(180)
CLUSTER_OVERRIDES = {"leader.imbalance.check.interval.seconds": "2"}


def test_leaders_move_back_to_preferred_replicas(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("rebal")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[1, 2, 3], [1, 3, 2], [2, 1, 3]]
    admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=assignment)])[topic].result(30)
    cluster.wait_full_isr(topic, 3)
    cluster.brokers[1].stop()
    for p in (0, 1):
        cluster.wait_leader(topic, p, not_in={1})
    cluster.start_broker(1)
    cluster.wait_full_isr(topic, 3)
    # Broker 1 leads none of its two preferred partitions (100% > 10%): both move back.
    wait_until(lambda: [cluster.leader(topic, p) for p in range(3)] == [1, 1, 2], 30,
               what="the preferred replicas leading again")
