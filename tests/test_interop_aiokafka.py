"""aiokafka 0.14 against a real strom broker: admin, produce (plain and idempotent), consume, seek, murmur2."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from helpers import check_offsets_for_times, placed_by_partition

PARTITIONS = 3


async def _getn(consumer: AIOKafkaConsumer, n: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=200, max_records=500)
        for recs in batches.values():
            out.extend(recs)
    assert len(out) == n, f"consumed {len(out)} of {n}"
    extra = await consumer.getmany(timeout_ms=300)
    assert not any(extra.values()), "unexpected extra records"
    return out


async def _scenario(bs: str, topic: str, idempotent: bool) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=15000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=bs, request_timeout_ms=15000, linger_ms=5,
                                enable_idempotence=idempotent, acks="all")
    await producer.start()
    t0 = int(time.time() * 1000) - 60_000
    sent = []
    try:
        futures = []
        for i in range(90):
            key = f"acct-{i % 9}".encode() if i % 3 else None
            headers = [("idx", str(i).encode()), ("src", b"aiokafka")]
            ts = t0 + i * 10
            futures.append(await producer.send(topic, value=f"v{i}".encode(), key=key, headers=headers,
                                               timestamp_ms=ts))
            sent.append((key, f"v{i}".encode(), headers, ts))
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()

    by_part = placed_by_partition(sent, metas, PARTITIONS)

    consumer = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False,
                                request_timeout_ms=15000, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = await _getn(consumer, len(sent))
        for p, recs in by_part.items():
            rs = [r for r in got if r.partition == p]
            assert [(r.offset, r.key, r.value, [(k, bytes(v)) for k, v in r.headers], r.timestamp) for r in rs] == \
                [(o, k, v, h, ts) for o, k, v, h, ts in recs]

        # Seek to an offset.
        for p, recs in by_part.items():
            consumer.seek(TopicPartition(topic, p), len(recs) - 3)
        got = await _getn(consumer, 3 * len(by_part))
        for p, recs in by_part.items():
            assert [r.offset for r in got if r.partition == p] == [r[0] for r in recs[-3:]]

        # Seek to a timestamp.
        target = t0 + 61 * 10 - 4
        found = await consumer.offsets_for_times({tp: target for tp in tps})
        total = check_offsets_for_times(found, by_part, target)
        for tp, oat in found.items():
            if oat is not None:
                consumer.seek(tp, oat.offset)
            else:
                await consumer.seek_to_end(tp)
        got = await _getn(consumer, total)
        assert sorted(r.value for r in got) == sorted(v for _, v, _, ts in sent if ts >= target)
        ends = await consumer.end_offsets(tps)
        assert ends == {TopicPartition(topic, p): len(by_part.get(p, [])) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


def test_produce_consume_seek(module_broker) -> None:
    asyncio.run(asyncio.wait_for(_scenario(module_broker.bootstrap, "aiokafka-topic", idempotent=False), 90))


def test_idempotent_produce_consume_seek(module_broker) -> None:
    asyncio.run(asyncio.wait_for(_scenario(module_broker.bootstrap, "aiokafka-idempotent", idempotent=True), 90))
