"""A three-broker cluster on ZooKeeper: topics are placed and led across brokers, replicas agree,
every client sees the brokers, leaders, replicas and ISR."""

from __future__ import annotations

import functools
import subprocess
import time

import pytest
from clusterproc import Cluster, wait_replicas_identical
from conftest import unique
from helpers import confluent_consume, confluent_produce, create_topic_code

pytestmark = pytest.mark.timeout(180)


def _create(cluster: Cluster, topic: str, partitions: int, rf: int = 3, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=config or {})])[topic].result(30)


def test_topic_is_spread_and_replicas_agree(cluster: Cluster) -> None:
    topic = unique("spread")
    _create(cluster, topic, 6)
    replicas = cluster.replicas(topic)
    assert all(len(set(r)) == 3 for r in replicas.values())
    leaders = {cluster.wait_leader(topic, p) for p in range(6)}
    assert leaders == {1, 2, 3}, f"leaders of 6 partitions over 3 brokers: {leaders}"
    records = [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(3000)]
    delivered = confluent_produce(cluster.bootstrap, topic, records, {"acks": "all", "enable.idempotence": True})
    assert len(delivered) == 3000
    cluster.wait_full_isr(topic, 6)
    wait_replicas_identical(cluster, topic, 6)
    got = confluent_consume(cluster.bootstrap, topic, range(6), 3000)
    assert sorted(m.value() for m in got) == sorted(r["value"] for r in records)


def test_too_few_brokers_is_invalid_replication_factor(cluster: Cluster) -> None:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as info:
        _create(cluster, unique("rf4"), 1, rf=4)
    assert info.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_validate_only_and_replica_assignments_against_the_live_brokers(cluster: Cluster) -> None:
    """CreateTopics checks replication factors and explicit assignments against the registered
    brokers: validate_only creates nothing, an unknown or repeated broker is refused, a valid
    assignment is what ZooKeeper holds."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    code = functools.partial(create_topic_code, admin)

    validated, unknown, repeated, placed = (unique(n) for n in ("validated", "unknown", "repeated", "placed"))
    assert code(NewTopic(validated, 2, 3), validate_only=True) == 0
    assert code(NewTopic(validated, 2, 4), validate_only=True) == KafkaError.INVALID_REPLICATION_FACTOR
    assert code(NewTopic(unknown, 1, replica_assignment=[[1, 9]])) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert code(NewTopic(repeated, 1, replica_assignment=[[2, 2]])) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert code(NewTopic(placed, 2, replica_assignment=[[3, 1], [2, 3]])) == 0
    assert cluster.replicas(placed) == {0: [3, 1], 1: [2, 3]}
    assert not {validated, unknown, repeated} & set(admin.list_topics(timeout=10).topics)


def test_clients_see_the_cluster(cluster: Cluster) -> None:
    topic = unique("seen")
    _create(cluster, topic, 3)
    for p in range(3):
        cluster.wait_leader(topic, p)
    cluster.wait_full_isr(topic, 3)
    expected = {p: (cluster.leader(topic, p), sorted(cluster.replicas(topic)[p])) for p in range(3)}
    ports = {b.port for b in cluster.brokers.values()}
    controller = cluster.controller()

    # kcat -L
    out = subprocess.run(["kcat", "-L", "-b", cluster.bootstrap, "-t", topic], capture_output=True, text=True,
                         timeout=30).stdout
    assert "3 brokers:" in out and "(controller)" in out
    for p, (leader, _) in expected.items():
        line = next(ln for ln in out.splitlines() if f"partition {p}," in ln)
        assert f"leader {leader}," in line
        assert f"replicas: {','.join(map(str, cluster.replicas(topic)[p]))}" in line

    # confluent-kafka
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    assert {b.port for b in md.brokers.values()} == ports
    assert md.controller_id == controller
    for p, (leader, reps) in expected.items():
        part = md.topics[topic].partitions[p]
        assert (part.leader, sorted(part.replicas), sorted(part.isrs)) == (leader, reps, reps)

    # kafka-python
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        desc = kp.describe_topics([topic])[0]
        for part in desc["partitions"]:
            leader, reps = expected[part["partition_index"]]
            assert (part["leader_id"], sorted(part["replica_nodes"]), sorted(part["isr_nodes"])) == (leader, reps, reps)
        cluster_info = kp.describe_cluster()
        assert {b["port"] for b in cluster_info["brokers"]} == ports
        assert cluster_info["controller_id"] == controller
    finally:
        kp.close()

    # aiokafka
    import asyncio

    from aiokafka import AIOKafkaClient

    async def aio() -> None:
        client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap)
        await client.bootstrap()
        try:
            await client.force_metadata_update()
            assert {b.port for b in client.cluster.brokers()} == ports
            for p, (leader, _) in expected.items():
                assert client.cluster.leader_for_partition(_tp(topic, p)) == leader
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(aio(), 30))


def _tp(topic: str, p: int):  # type: ignore[no-untyped-def]
    from aiokafka.structs import TopicPartition

    return TopicPartition(topic, p)


def test_delete_topic_removes_every_replica(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient

    topic = unique("doomed")
    _create(cluster, topic, 2)
    confluent_produce(cluster.bootstrap, topic, [{"value": b"x"}] * 10, {"acks": "all"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 20
    left = ["?"]
    while time.monotonic() < deadline:
        left = [d for b in cluster.brokers.values() for d in b.data_dir.glob(f"{topic}-*") if "-delete" not in d.name]
        if not left and not cluster.zk.exists(f"/brokers/topics/{topic}"):
            break
        time.sleep(0.1)
    assert not left, left
