"""Bulk cluster operations at a size that still runs in seconds (issue 28; the issue's sizes are in
benchmarks/cluster_bench.py scale): CreateTopics of 300 partitions answers once every broker
serves every leader, a controlled shutdown moves every leadership of the broker before it exits, the
broker back again rejoins every ISR, and the deletion of a topic of that size leaves nothing of it
in ZooKeeper, in any broker's Metadata or log directories, and its name free for a new topic."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from clusterproc import Cluster
from conftest import unique
from helpers import RawConnection, wait_until

from strom.cluster import zk_layout as zl
from strom.protocol.errors import ErrorCode as E

PARTITIONS = 300


def _leaderless(cluster: Cluster, broker_id: int, topic: str) -> list[int]:
    """Partitions of ``topic`` without a leader in this broker's own Metadata answer."""
    return _leaderless_of(cluster, broker_id, topic, PARTITIONS)


def _leaderless_of(cluster: Cluster, broker_id: int, topic: str, partitions: int) -> list[int]:
    with RawConnection(cluster.brokers[broker_id].bootstrap, timeout=10) as conn:
        md = conn.metadata([topic])
    (t,) = [t for t in md.topics if str(t.name) == topic]
    assert int(t.error_code) == 0, f"broker {broker_id}: {topic} error {t.error_code}"
    served = {int(p.partition_index): int(p.leader_id) for p in t.partitions}
    return [p for p in range(partitions) if served.get(p, -1) < 0]


@pytest.fixture(scope="module")
def big_topic(module_cluster: Cluster) -> Iterator[str]:
    """A 300-partition RF=3 topic, created once for the module (the creation is the first test's
    subject) and deleted at the end, so the shared cluster is as it was."""
    from confluent_kafka.admin import AdminClient

    module_cluster.ensure_all_up()
    topic = unique("bulk")
    yield topic
    module_cluster.ensure_all_up()
    admin = AdminClient({"bootstrap.servers": module_cluster.bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)


def test_create_topics_answers_once_every_broker_serves_every_leader(cluster: Cluster, big_topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(big_topic, PARTITIONS, 3)], operation_timeout=60,
                        request_timeout=90)[big_topic].result(120)
    # At once, no waiting: the answer came after every broker's Metadata had them.
    for b in sorted(cluster.brokers):
        missing = _leaderless(cluster, b, big_topic)
        assert not missing, f"broker {b} serves {len(missing)} partitions without a leader: {missing[:10]}"
    # And the states were written in batches, not one transaction per partition.
    assert any(f"wrote {PARTITIONS} partition states ({PARTITIONS} new" in line
               for b in cluster.brokers.values() for line in b.log_lines), cluster.logs()
    cluster.wait_full_isr(big_topic, PARTITIONS, timeout=60)


def test_controlled_shutdown_moves_every_leadership_before_exit(cluster: Cluster, big_topic: str) -> None:
    cluster.wait_full_isr(big_topic, PARTITIONS, timeout=60)
    controller = cluster.controller()
    led: dict[int, int] = {}
    for p in range(PARTITIONS):
        leader = cluster.leader(big_topic, p)
        led[leader] = led.get(leader, 0) + 1
    victim = max((b for b in cluster.brokers if b != controller), key=lambda b: led.get(b, 0))
    assert led.get(victim, 0) > 0
    logged_before = len(cluster.brokers[victim].log_lines)
    assert cluster.brokers[victim].stop() == 0  # SIGTERM, and it exits on its own
    # ZooKeeper: nothing led by the stopped broker.
    still = [p for p in range(PARTITIONS) if cluster.leader(big_topic, p) == victim]
    assert not still, f"{len(still)} partitions still led by stopped broker {victim}: {still[:10]}"
    # The survivors serve what ZooKeeper says, and none names the stopped broker as leader.
    cluster.settle([big_topic], timeout=60)
    for b in cluster.registered():
        with RawConnection(cluster.brokers[b].bootstrap, timeout=10) as conn:
            md = conn.metadata([big_topic])
        named = [int(p.partition_index) for t in md.topics for p in t.partitions if int(p.leader_id) == victim]
        assert not named, f"broker {b} still names broker {victim} leader of {named[:10]}"
    # The broker's own account: how many moved, none left.
    # (It may lead partitions of other tests' topics too, some with no other in-sync replica.)
    said = [line for line in cluster.brokers[victim].log_lines[logged_before:] if "controlled shutdown:" in line]
    moved = re.search(r"controlled shutdown: (\d+) of (\d+) leaderships moved", said[-1]) if said else None
    assert moved and int(moved[1]) >= led[victim] and "none left to move" in said[-1], said


def test_restarted_broker_rejoins_every_isr(cluster: Cluster, big_topic: str) -> None:
    for b in cluster.brokers.values():
        if not b.alive():
            b.start(timeout=60)
    cluster.wait_full_isr(big_topic, PARTITIONS, timeout=60)


def _topic_dirs(cluster: Cluster, broker_id: int, topic: str) -> list[str]:
    """This broker's partition directories of ``topic``, live or set aside for deletion."""
    pattern = re.compile(rf"{re.escape(topic)}-\d+($|\..*-delete$)")
    data_dir = cluster.brokers[broker_id].data_dir
    return [d.name for d in data_dir.iterdir() if pattern.match(d.name)] if data_dir.exists() else []


def test_deleting_a_topic_of_hundreds_of_partitions_removes_it_everywhere(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("bulk-delete")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=60, request_timeout=90)[topic].result(120)
    old_id = cluster.zk.get(zl.topic_path(topic))[0]
    # Every replica's log is made before the deletion, so every broker has logs to drop.
    wait_until(lambda: all(len(_topic_dirs(cluster, b, topic)) == PARTITIONS for b in cluster.brokers), 60,
               what="every replica's log made")
    controller = cluster.controller()
    logged_before = len(cluster.brokers[controller].log_lines)

    admin.delete_topics([topic], operation_timeout=60)[topic].result(90)

    # ZooKeeper: the topic, its partitions and states, its config and the request are all gone.
    for path in (zl.topic_path(topic), zl.topic_config_path(topic), zl.delete_topic_path(topic)):
        assert cluster.zk.exists(path) is None, f"{path} is still in ZooKeeper"
    # The controller removed them in a few transactions, not one call per znode.
    # (its log line is read from the broker's output by a thread: waited for, not assumed there yet)
    def said_lines() -> list[str]:
        return [line for line in cluster.brokers[controller].log_lines[logged_before:] if "znodes in" in line]

    said = wait_until(said_lines, 30, what="the controller's line on the deletion")
    counted = re.search(r"deleted 1 topics: (\d+) znodes in (\d+) transactions", said[-1]) if said else None
    assert counted and int(counted[1]) >= 2 * PARTITIONS + 3 and int(counted[2]) < int(counted[1]) // 100, said

    # Every broker's Metadata drops it, and every broker removes its logs.
    def unknown_everywhere() -> bool:
        for b in cluster.brokers:
            with RawConnection(cluster.brokers[b].bootstrap, timeout=10) as conn:
                (t,) = conn.metadata([topic]).topics
            if int(t.error_code) != E.unknown_topic_or_partition:
                return False
        return True

    wait_until(unknown_everywhere, 30, what=f"every broker's Metadata without {topic}")
    wait_until(lambda: not any(_topic_dirs(cluster, b, topic) for b in cluster.brokers), 60,
               what=f"every broker's logs of {topic} removed")

    # The name is free again: a new topic of that name, with another id, is served and works.
    admin.create_topics([NewTopic(topic, 6, 3)], operation_timeout=60)[topic].result(90)
    assert cluster.zk.get(zl.topic_path(topic))[0] != old_id
    cluster.settle([topic], timeout=60)
    for b in cluster.brokers:
        assert not _leaderless_of(cluster, b, topic, 6), f"broker {b} serves the new {topic} without leaders"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"after re-create", partition=5)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("g"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 5, 0)])
        msg = wait_until(lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m, 30,
                         what="the record produced after the re-create")
        assert msg.value() == b"after re-create" and msg.offset() == 0
    finally:
        consumer.close()
    admin.delete_topics([topic], operation_timeout=60)[topic].result(90)
