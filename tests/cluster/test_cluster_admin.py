"""Admin requests to any broker act on the whole cluster: topic and broker configs, more
partitions; and min.insync.replicas refuses acks=all writes the ISR cannot carry."""

from __future__ import annotations

import pytest
from clusterproc import Cluster
from conftest import unique
from helpers import confluent_produce, wait_until

pytestmark = pytest.mark.timeout(180)


def _admin(bootstrap: str):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _describe(bootstrap: str, kind: str, name: str) -> dict[str, tuple[str, str]]:
    from confluent_kafka.admin import ConfigResource

    admin = _admin(bootstrap)
    result = admin.describe_configs([ConfigResource(kind, name)])
    entries = next(iter(result.values())).result(20)
    return {k: (v.value, str(v.source)) for k, v in entries.items()}


def test_topic_config_change_reaches_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import ConfigResource, NewTopic

    topic = unique("cfg")
    admin = _admin(cluster.brokers[1].bootstrap)
    admin.create_topics([NewTopic(topic, 1, 3, config={"retention.ms": "3600000"})])[topic].result(30)
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "7200000", "cleanup.policy": "delete"})
    admin.alter_configs([resource])[resource].result(20)
    for b in cluster.brokers.values():
        wait_until(lambda b=b: _describe(b.bootstrap, "topic", topic)["retention.ms"][0] == "7200000", 10,
                   what=f"the new retention.ms through broker {b.port}")


def test_broker_config_set_through_another_broker_takes_effect(cluster: Cluster) -> None:
    """A dynamic config of broker 2, sent to broker 1, is kept in ZooKeeper and applied by broker 2."""
    from confluent_kafka.admin import ConfigResource

    admin = _admin(cluster.brokers[1].bootstrap)
    resource = ConfigResource("broker", "2", set_config={"log.retention.ms": "123456789"})
    admin.alter_configs([resource])[resource].result(20)
    try:
        wait_until(lambda: _describe(cluster.brokers[2].bootstrap, "broker", "2")["log.retention.ms"][0]
                   == "123456789", 10, what="broker 2 applying the config set through broker 1")
        assert cluster.zk.exists("/config/brokers/2")
    finally:
        cleared = ConfigResource("broker", "2", set_config={})
        admin.alter_configs([cleared])[cleared].result(20)
    wait_until(lambda: _describe(cluster.brokers[2].bootstrap, "broker", "2")["log.retention.ms"][0] != "123456789",
               10, what="broker 2 dropping the cleared config")


def test_create_partitions_places_replicas_and_takes_writes(cluster: Cluster) -> None:
    from confluent_kafka.admin import NewPartitions, NewTopic

    topic = unique("grow")
    admin = _admin(cluster.brokers[2].bootstrap)
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    replicas = cluster.replicas(topic)
    assert sorted(replicas) == [0, 1, 2, 3, 4] and all(len(set(r)) == 3 for r in replicas.values())
    cluster.wait_full_isr(topic, 5)
    delivered = confluent_produce(cluster.bootstrap, topic, [{"value": b"p%d" % p, "partition": p} for p in range(5)],
                                  {"acks": "all"})
    assert sorted(d.partition for d in delivered) == [0, 1, 2, 3, 4]


def test_min_insync_replicas_refuses_acks_all_below_it(cluster: Cluster) -> None:
    """RF 3 with min.insync.replicas=3: with one broker down the ISR has 2, so acks=all writes get
    NOT_ENOUGH_REPLICAS while acks=1 writes still go through; back to 3, acks=all works again."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    topic = unique("minisr")
    admin = _admin(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "3"})])[topic].result(30)
    cluster.wait_full_isr(topic, 1)
    cluster.brokers[3].kill()
    wait_until(lambda: (s := cluster.state(topic, 0)) is not None and 3 not in s.isr, 20, what="broker 3 out of the ISR")
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 3000,
                         "retries": 0})
    producer.produce(topic, b"refused", on_delivery=lambda err, msg: errors.append(err.name() if err else "OK"))
    producer.flush(10)
    assert errors and errors[0] in ("NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT"), errors
    if errors[0] == "_MSG_TIMED_OUT":  # librdkafka retried the retriable error until the timeout
        pytest.fail("acks=all was not refused with NOT_ENOUGH_REPLICAS within 3 s")
    ok = confluent_produce(cluster.bootstrap, topic, [{"value": b"acks1"}], {"acks": "1"})
    assert len(ok) == 1
    cluster.brokers[3].start(timeout=60)
    cluster.wait_full_isr(topic, 1)
    assert len(confluent_produce(cluster.bootstrap, topic, [{"value": b"again"}], {"acks": "all"})) == 1
