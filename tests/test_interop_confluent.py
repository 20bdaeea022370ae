"""confluent-kafka (librdkafka 2.x) against a real strom broker: admin, produce, consume, seek, partitioners,
idempotence."""

from __future__ import annotations

import functools
import time
from collections import defaultdict

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic, ResourceType
from helpers import (
    confluent_admin,
    confluent_consume,
    confluent_produce,
    create_topic_code,
    create_topics,
    java_partition,
    librdkafka_consistent_partition,
    murmur2,
    wait_until,
)

PARTITIONS = 4


def _source(entry) -> int:
    return int(getattr(entry.source, "value", entry.source))


def test_murmur2_matches_java_vectors() -> None:
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"abc": 479470107,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
    }
    for key, expected in vectors.items():
        assert murmur2(key) == expected, key


def _records(n_keyed: int, n_unkeyed: int, t0: int) -> list[dict]:
    recs = []
    for i in range(n_keyed + n_unkeyed):
        keyed = i < n_keyed
        recs.append({
            "key": f"key-{i % 13}".encode() if keyed else None,
            "value": f"value-{i}".encode(),
            "headers": [("idx", str(i).encode()), ("kind", b"keyed" if keyed else b"unkeyed")],
            "timestamp": t0 + i * 10,
        })
    return recs


@pytest.mark.parametrize("partitioner", ["murmur2_random", "consistent_random"])
def test_produce_consume_seek(module_broker, partitioner: str) -> None:
    bs = module_broker.bootstrap
    topic = f"confluent-{partitioner}"
    create_topics(bs, {topic: PARTITIONS})
    t0 = int(time.time() * 1000) - 60_000
    records = _records(60, 30, t0)
    delivered = confluent_produce(bs, topic, records, {"partitioner": partitioner, "acks": "all"})

    # Keyed records went where the partitioner says; every partition got something.
    expect = java_partition if partitioner == "murmur2_random" else librdkafka_consistent_partition
    for d in delivered:
        if d.key is not None:
            assert d.partition == expect(d.key, PARTITIONS), d
    by_part: dict[int, list] = defaultdict(list)
    for d in delivered:
        by_part[d.partition].append(d)
    assert set(by_part) == set(range(PARTITIONS))
    for p, ds in by_part.items():
        assert sorted(d.offset for d in ds) == list(range(len(ds))), f"partition {p} offsets not contiguous"

    # Everything from the beginning: content, headers, timestamps and per-partition order.
    msgs = confluent_consume(bs, topic, range(PARTITIONS), len(records))
    got: dict[int, list] = defaultdict(list)
    for m in msgs:
        got[m.partition()].append(m)
    for p, ds in by_part.items():
        ms = got[p]
        assert [m.offset() for m in ms] == list(range(len(ds)))
        ds_by_offset = sorted(ds, key=lambda d: d.offset)
        # Offsets follow produce order within a partition.
        assert [int(d.headers[0][1]) for d in ds_by_offset] == sorted(int(d.headers[0][1]) for d in ds)
        for m, d in zip(ms, ds_by_offset, strict=True):
            assert m.value() == d.value
            assert m.key() == d.key
            assert m.headers() == d.headers
            assert m.timestamp()[1] == d.timestamp
            assert m.timestamp()[0] != 0  # not TIMESTAMP_NOT_AVAILABLE

    # Seek to an offset in the middle of each partition.
    for p, ds in by_part.items():
        mid = len(ds) // 2
        ms = confluent_consume(bs, topic, [p], len(ds) - mid, start=mid)
        assert [m.offset() for m in ms] == list(range(mid, len(ds)))
        assert [m.value() for m in ms] == [d.value for d in sorted(ds, key=lambda d: d.offset)][mid:]

    # Seek to a timestamp: offsets_for_times finds the first record at/after it in each partition.
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bs, "group.id": f"ts-{topic}", "enable.auto.commit": False})
    try:
        for target_i in (0, 17, 45, 89):
            target = t0 + target_i * 10 - 3
            asked = [TopicPartition(topic, p, target) for p in range(PARTITIONS)]
            found = consumer.offsets_for_times(asked, timeout=10)
            for tp in found:
                assert tp.error is None
                later = [d for d in by_part[tp.partition] if d.timestamp >= target]
                expected = min(d.offset for d in later) if later else -1
                if expected == -1:
                    # Nothing at or after the timestamp: Kafka answers offset -1 (librdkafka: OFFSET_END).
                    assert tp.offset < 0
                else:
                    assert tp.offset == expected, (target_i, tp)
        # And consuming from the found offsets yields exactly the records at/after the timestamp.
        target = t0 + 45 * 10
        found = consumer.offsets_for_times([TopicPartition(topic, p, target) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    want = sorted(d.value for d in delivered if d.timestamp >= target)
    total = 0
    values = []
    for tp in found:
        n = len([d for d in by_part[tp.partition] if d.timestamp >= target])
        if n:
            values += [m.value() for m in confluent_consume(bs, topic, [tp.partition], n, start=tp.offset)]
            total += n
    assert sorted(values) == want and total == len(want)


def test_create_topics_validate_only_and_replica_assignments(module_broker) -> None:
    """One broker: validate_only creates nothing; a replication factor above 1 and an assignment
    naming another broker are refused with Kafka's codes; an assignment of this broker is used."""
    admin = confluent_admin(module_broker.bootstrap)

    code = functools.partial(create_topic_code, admin)

    assert code(NewTopic("validated", 2, 1), validate_only=True) == 0
    assert "validated" not in admin.list_topics(timeout=10).topics
    assert code(NewTopic("rf2", 1, 2), validate_only=True) == KafkaError.INVALID_REPLICATION_FACTOR
    assert code(NewTopic("rf2", 1, 2)) == KafkaError.INVALID_REPLICATION_FACTOR
    assert code(NewTopic("elsewhere", 2, replica_assignment=[[0], [5]])) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert code(NewTopic("assigned", 2, replica_assignment=[[0], [0]])) == 0
    assert len(admin.list_topics("assigned", timeout=10).topics["assigned"].partitions) == 2
    assert not {"rf2", "elsewhere"} & set(admin.list_topics(timeout=10).topics)


def test_admin_create_describe_partitions_delete(module_broker) -> None:
    bs = module_broker.bootstrap
    admin = confluent_admin(bs)
    topic = "confluent-admin"
    fs = admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "delete"})],
                             operation_timeout=10, request_timeout=15)
    fs[topic].result(timeout=20)
    md = admin.list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 3
    assert md.topics[topic].error is None

    # Creating it again is refused with TOPIC_ALREADY_EXISTS.
    fs = admin.create_topics([NewTopic(topic, 3, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # A bad name is refused with INVALID_TOPIC_EXCEPTION.
    fs = admin.create_topics([NewTopic("bad/name", 1, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs["bad/name"].result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.TOPIC_EXCEPTION

    # CreatePartitions: 3 -> 5, and the new partitions take records.
    fs = admin.create_partitions([NewPartitions(topic, 5)], request_timeout=15)
    fs[topic].result(timeout=20)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5, 10)
    # Shrinking is refused (INVALID_PARTITIONS).
    fs = admin.create_partitions([NewPartitions(topic, 2)], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    delivered = confluent_produce(bs, topic, [{"value": b"p4", "partition": 4}, {"value": b"p3", "partition": 3}])
    assert [(d.partition, d.offset) for d in delivered] == [(4, 0), (3, 0)]

    # DescribeConfigs for the topic: the override with its source, defaults for the rest.
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert entries["retention.ms"].value == "3600000"
    assert _source(entries["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].value == "1073741824"
    assert _source(entries["segment.bytes"]) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"

    # DescribeConfigs for the broker.
    res = ConfigResource(ResourceType.BROKER, "0")
    entries = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert entries["num.partitions"].value == "1"
    assert entries["log.segment.bytes"].value == "1073741824"
    assert entries["listeners"].value == f"PLAINTEXT://{bs}"
    assert _source(entries["listeners"]) == ConfigSource.STATIC_BROKER_CONFIG.value
    assert _source(entries["message.max.bytes"]) == ConfigSource.DEFAULT_CONFIG.value

    # DescribeConfigs of a missing topic fails.
    res = ConfigResource(ResourceType.TOPIC, "no-such-topic-here")
    with pytest.raises(KafkaException) as ei:
        admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # DeleteTopics: gone from metadata, and deleting it again is UNKNOWN_TOPIC_OR_PARTITION.
    admin.delete_topics([topic], operation_timeout=10, request_timeout=15)[topic].result(timeout=20)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 10)
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics([topic], request_timeout=15)[topic].result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # The name can be reused; the new topic starts empty.
    create_topics(bs, {topic: 2})
    delivered = confluent_produce(bs, topic, [{"value": b"again", "partition": 1}])
    assert delivered[0].offset == 0


def test_idempotent_producer(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = "confluent-idempotent"
    create_topics(bs, {topic: 3})
    records = [{"key": f"k{i % 7}".encode(), "value": f"v{i}".encode()} for i in range(3000)]
    delivered = confluent_produce(bs, topic, records, {"enable.idempotence": True, "linger.ms": 2,
                                                      "batch.num.messages": 50, "partitioner": "murmur2_random"})
    by_part: dict[int, list] = defaultdict(list)
    for d in delivered:
        by_part[d.partition].append(d)
        assert d.partition == java_partition(d.key, 3)
    msgs = confluent_consume(bs, topic, range(3), len(records))
    got: dict[int, list] = defaultdict(list)
    for m in msgs:
        got[m.partition()].append(m.value())
    for p, ds in by_part.items():
        # Idempotence keeps produce order and writes nothing twice.
        assert got[p] == [d.value for d in ds]
        assert [d.offset for d in ds] == list(range(len(ds)))


def test_auto_create_on_produce(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = "confluent-auto-created"
    delivered = confluent_produce(bs, topic, [{"value": b"first"}, {"value": b"second"}])
    assert [d.offset for d in delivered] == [0, 1]
    md = confluent_admin(bs).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 1  # num.partitions default
    msgs = confluent_consume(bs, topic, [0], 2)
    assert [m.value() for m in msgs] == [b"first", b"second"]
