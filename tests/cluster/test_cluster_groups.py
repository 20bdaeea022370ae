"""Consumer groups in a cluster: the coordinator of a group is the leader of its __consumer_offsets
partition; it moves with that leadership and the group keeps consuming, its commits intact."""

from __future__ import annotations

import contextlib
import time

import pytest
from clusterproc import SESSION_TIMEOUT_MS, Cluster
from conftest import unique
from helpers import confluent_produce, wait_until

from strom.coordinator.records import partition_for

pytestmark = pytest.mark.timeout(240)


def test_group_survives_coordinator_failover(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = unique("grp"), unique("g")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    first = [{"value": b"a%05d" % i} for i in range(300)]
    confluent_produce(cluster.bootstrap, topic, first, {"acks": "all"})

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "socket.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 1000})
    seen: list[bytes] = []

    def consume_until(n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < n and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    seen.append(m.value())
            # Nothing to commit yet, or the coordinator is moving: the next round tries again.
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)
        assert len(seen) >= n, f"consumed {len(seen)} of {n}"

    def committed_at_end(client: Consumer, parts: list[TopicPartition]) -> bool:
        # Each partition's commit is its end offset. The sticky partitioner may leave a partition
        # empty: it has no commit (OFFSET_INVALID), which is right for it.
        ends = {tp.partition: client.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        return sum(ends.values()) == 600 and all(
            tp.offset == ends[tp.partition] or (tp.offset < 0 and ends[tp.partition] == 0) for tp in parts)

    try:
        consumer.subscribe([topic])
        consume_until(300, 60)
        offsets_partition = partition_for(group, 3)
        coordinator = cluster.wait_leader("__consumer_offsets", offsets_partition)
        cluster.brokers[coordinator].kill()
        cluster.wait_leader("__consumer_offsets", offsets_partition, not_in={coordinator},
                            timeout=SESSION_TIMEOUT_MS / 1000 + 15)
        confluent_produce(cluster.bootstrap, topic, [{"value": b"b%05d" % i} for i in range(300)], {"acks": "all"})
        consume_until(600, 90)

        def committed_all() -> bool:
            # The last commit of consume_until may have met the coordinator moving: commit again.
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)
            try:
                parts = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
                return committed_at_end(consumer, parts)
            except KafkaException:  # the client still meets the dead broker: ask again
                return False

        wait_until(committed_all, 30, interval=0.5, what="every record's offset committed")
    finally:
        consumer.close()
    assert sorted(seen) == sorted([r["value"] for r in first] + [b"b%05d" % i for i in range(300)])

    # A new member of the group starts where the group left off: the commits survived.
    cluster.start_broker(coordinator)
    again = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        def group_resumes_at_end() -> bool:
            try:
                return committed_at_end(again, again.committed([TopicPartition(topic, p) for p in range(3)],
                                                               timeout=15))
            except KafkaException:  # the restarted broker is still joining: ask again
                return False

        wait_until(group_resumes_at_end, 30, interval=0.5, what="the group's commits read by a new member")
    finally:
        again.close()
