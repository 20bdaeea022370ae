"""kafka-python 3.x against a real strom broker: admin, default (idempotent) producer, consume, seek, murmur2."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from helpers import RawConnection, check_offsets_for_times, placed_by_partition, wait_until
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError

from strom.records import batch as rb

PARTITIONS = 5


@pytest.fixture
def admin(module_broker):
    a = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=15000)
    yield a
    a.close()


def _consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         request_timeout_ms=15000, fetch_max_wait_ms=100)


def _poll_n(consumer: KafkaConsumer, n: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200, max_records=500).values():
            out.extend(recs)
    assert len(out) == n, f"consumed {len(out)} of {n}"
    extra = consumer.poll(timeout_ms=300)
    assert not any(extra.values()), "unexpected extra records"
    return out


def test_produce_consume_seek(module_broker, admin) -> None:
    bs = module_broker.bootstrap
    topic = "kafka-python-topic"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])

    producer = KafkaProducer(bootstrap_servers=bs, request_timeout_ms=15000, linger_ms=5)  # idempotent by default
    t0 = int(time.time() * 1000) - 60_000
    sent = []
    futures = []
    for i in range(80):
        key = f"user-{i % 11}".encode() if i < 50 else None
        headers = [("idx", str(i).encode()), ("h2", b"")]
        ts = t0 + i * 10
        futures.append(producer.send(topic, value=f"v{i}".encode(), key=key, headers=headers, timestamp_ms=ts))
        sent.append((key, f"v{i}".encode(), headers, ts))
    metas = [f.get(timeout=30) for f in futures]
    producer.close(timeout=10)

    by_part = placed_by_partition(sent, metas, PARTITIONS)

    # The default producer is idempotent: its batches carry a producer id and sequence numbers.
    with RawConnection(bs) as raw:
        p0 = next(iter(by_part))
        data = bytes(raw.fetch(topic, p0, 0).records or b"")
        headers = rb.iter_batches(data)
        assert headers and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
        assert headers[0].base_sequence == 0

    consumer = _consumer(bs)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got = _poll_n(consumer, len(sent))
        per_part: dict[int, list] = defaultdict(list)
        for r in got:
            per_part[r.partition].append(r)
        for p, recs in by_part.items():
            rs = per_part[p]
            assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in rs] == \
                [(o, k, v, h, ts) for o, k, v, h, ts in recs]

        # Seek to an offset in every partition.
        for p, recs in by_part.items():
            mid = len(recs) // 2
            consumer.seek(TopicPartition(topic, p), mid)
        got = _poll_n(consumer, sum(len(r) - len(r) // 2 for r in by_part.values()))
        for p, recs in by_part.items():
            assert [r.value for r in got if r.partition == p] == [r[2] for r in recs[len(recs) // 2:]]

        # Seek to a timestamp.
        target = t0 + 33 * 10 - 1
        found = consumer.offsets_for_times({tp: target for tp in tps}, timeout_ms=15000)
        expected_total = check_offsets_for_times(found, by_part, target)
        for tp, oat in found.items():
            if oat is not None:
                consumer.seek(tp, oat.offset)
            else:
                consumer.seek_to_end(tp)
        got = _poll_n(consumer, expected_total)
        assert sorted(r.value for r in got) == sorted(v for _, v, _, ts in sent if ts >= target)

        # beginning/end offsets.
        assert consumer.beginning_offsets(tps, timeout_ms=15000) == {tp: 0 for tp in tps}
        ends = consumer.end_offsets(tps, timeout_ms=15000)
        assert ends == {TopicPartition(topic, p): len(by_part.get(p, [])) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_admin_partitions_and_delete(module_broker, admin) -> None:
    bs = module_broker.bootstrap
    topic = "kafka-python-admin"
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "7200000"})])
    admin.create_partitions({topic: NewPartitions(4)})
    consumer = _consumer(bs)
    try:
        wait_until(lambda: (consumer.partitions_for_topic(topic) or set()) == {0, 1, 2, 3}, 15,
                   what="4 partitions visible")
    finally:
        consumer.close()
    producer = KafkaProducer(bootstrap_servers=bs, request_timeout_ms=15000)
    meta = producer.send(topic, value=b"x", partition=3).get(timeout=30)
    assert (meta.partition, meta.offset) == (3, 0)
    producer.close(timeout=10)
    admin.delete_topics([topic])
    wait_until(lambda: topic not in admin.list_topics(), 15, what="topic deleted")
