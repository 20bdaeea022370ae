"""Compressed batches (gzip, snappy, lz4, zstd) round-trip through the broker unchanged."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from helpers import RawConnection, confluent_consume, confluent_produce, create_topics
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from strom.records import batch as rb
from strom.records import codec

CODECS = {"gzip": codec.GZIP, "snappy": codec.SNAPPY, "lz4": codec.LZ4, "zstd": codec.ZSTD}


def _values(tag: str, n: int) -> list[bytes]:
    # Compressible but distinct, and one big value so batches span several KiB.
    vals = [f"{tag}-record-{i:05d}-".encode() + b"abcdefgh" * (i % 40) for i in range(n)]
    vals[n // 2] = b"X" * 200_000
    return vals


def _stored_codecs(bs: str, topic: str, partition: int = 0) -> tuple[set[int], list[bytes | None]]:
    """Compression codecs of the batches as the broker stores and serves them, and the decoded values."""
    with RawConnection(bs) as raw:
        recs = raw.fetch_records(topic, partition)
        data = bytes(raw.fetch(topic, partition, 0).records or b"")
    return {h.compression for h in rb.iter_batches(data)}, [r.value for r in recs]


@pytest.mark.parametrize("name", list(CODECS))
def test_confluent_codec_round_trip(module_broker, name: str) -> None:
    bs = module_broker.bootstrap
    topic = f"compressed-confluent-{name}"
    create_topics(bs, {topic: 1})
    values = _values(name, 400)
    recs = [{"value": v, "key": f"k{i}".encode(), "headers": [("i", str(i).encode())]} for i, v in enumerate(values)]
    delivered = confluent_produce(bs, topic, recs, {"compression.type": name, "linger.ms": 50,
                                                   "acks": "all", "enable.idempotence": True})
    assert [d.offset for d in delivered] == list(range(len(values)))
    codecs, stored_values = _stored_codecs(bs, topic)
    assert codecs == {CODECS[name]}
    assert stored_values == values
    msgs = confluent_consume(bs, topic, [0], len(values))
    assert [m.value() for m in msgs] == values
    assert [m.key() for m in msgs] == [f"k{i}".encode() for i in range(len(values))]
    assert [m.headers() for m in msgs] == [[("i", str(i).encode())] for i in range(len(values))]
    # A fetch starting inside a compressed batch still yields exactly the records from that offset.
    msgs = confluent_consume(bs, topic, [0], 7, start=len(values) - 7)
    assert [m.offset() for m in msgs] == list(range(len(values) - 7, len(values)))


def test_mixed_codecs_in_one_partition(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = "compressed-mixed"
    create_topics(bs, {topic: 1})
    expected: list[bytes] = []
    for name in ["none", *CODECS, "gzip"]:
        vals = [f"{name}-{i}".encode() * 10 for i in range(50)]
        confluent_produce(bs, topic, [{"value": v} for v in vals], {"compression.type": name, "linger.ms": 20})
        expected += vals
    codecs, stored = _stored_codecs(bs, topic)
    assert codecs == {codec.NONE, *CODECS.values()}
    assert stored == expected
    assert [m.value() for m in confluent_consume(bs, topic, [0], len(expected))] == expected


def test_kafka_python_gzip(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = "compressed-kafka-python-gzip"
    create_topics(bs, {topic: 1})
    values = _values("kp", 300)
    producer = KafkaProducer(bootstrap_servers=bs, compression_type="gzip", linger_ms=20, request_timeout_ms=15000,
                             max_request_size=2_000_000)
    futures = [producer.send(topic, value=v, partition=0) for v in values]
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close(timeout=10)
    assert offsets == list(range(len(values)))
    codecs, stored = _stored_codecs(bs, topic)
    assert codecs == {codec.GZIP}
    assert stored == values
    consumer = KafkaConsumer(bootstrap_servers=bs, group_id=None, request_timeout_ms=15000, fetch_max_wait_ms=100)
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        for _ in range(100):
            for recs in consumer.poll(timeout_ms=200).values():
                got += [r.value for r in recs]
            if len(got) >= len(values):
                break
        assert got == values
    finally:
        consumer.close()


async def _aiokafka_round_trip(bs: str, topic: str, name: str, values: list[bytes]) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bs, compression_type=name, linger_ms=20, request_timeout_ms=15000,
                                max_request_size=2_000_000)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, partition=0) for v in values]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [m.offset for m in metas] == list(range(len(values)))
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, request_timeout_ms=15000, fetch_max_wait_ms=100)
    await consumer.start()
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        for _ in range(100):
            batches = await consumer.getmany(timeout_ms=200)
            for recs in batches.values():
                got += [r.value for r in recs]
            if len(got) >= len(values):
                break
    finally:
        await consumer.stop()
    return got


@pytest.mark.parametrize("name", list(CODECS))
def test_aiokafka_codec_round_trip(module_broker, name: str) -> None:
    bs = module_broker.bootstrap
    topic = f"compressed-aiokafka-{name}"
    create_topics(bs, {topic: 1})
    values = _values(f"aio-{name}", 300)
    got = asyncio.run(asyncio.wait_for(_aiokafka_round_trip(bs, topic, name, values), 60))
    assert got == values
    codecs, stored = _stored_codecs(bs, topic)
    assert codecs == {CODECS[name]}
    assert stored == values
