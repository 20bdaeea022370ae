"""Transactional producers and read_committed / read_uncommitted readers of the three Python clients,
shared by the transaction tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

# Broker settings for transaction tests: timed-out transactions are looked for every 200 ms.
TXN_BROKER = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    conf.update(extra)
    producer = Producer(conf)
    producer.init_transactions(20)
    return producer


def confluent_values(bootstrap: str, topic: str, partitions: int, isolation: str, quiet_s: float = 1.0,
                     timeout_s: float = 20.0, expect: int | None = None) -> list[bytes]:
    """Every value from the start of the topic, read until ``expect`` values (or nothing new for
    ``quiet_s`` once the first fetches had time to answer), in partition then offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        last_new = time.monotonic() + 2.0  # connecting and the first fetch are not "quiet"
        while time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=500, timeout=0.2)
            for m in msgs:
                if m.error() is not None:
                    assert not m.error().fatal(), m.error()
                    continue  # a transient event (a broker reconnecting): the consumer carries on
                got.append((m.partition(), m.offset(), m.value()))
            if msgs:
                last_new = time.monotonic()
            if expect is not None and len(got) >= expect:
                break
            if expect is None and time.monotonic() - last_new > quiet_s:
                break
        return [v for _, _, v in sorted(got)]
    finally:
        consumer.close()


def kafka_python_values(bootstrap: str, topic: str, partitions: int, isolation: str,
                        quiet_s: float = 1.5) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             consumer_timeout_ms=int(quiet_s * 1000), request_timeout_ms=15000)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = sorted((m.partition, m.offset, m.value) for m in consumer)
        return [v for _, _, v in got]
    finally:
        consumer.close()


def kafka_python_end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    """ListOffsets latest with the consumer's isolation level (the LSO for read_committed)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, request_timeout_ms=15000)
    try:
        ends = consumer.end_offsets([KTP(topic, p) for p in range(partitions)])
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        consumer.close()


def aiokafka_values(bootstrap: str, topic: str, partitions: int, isolation: str, quiet_s: float = 1.5) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False, request_timeout_ms=15000)
        await consumer.start()
        try:
            tps = [ATP(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: list[tuple[int, int, bytes]] = []
            last_new = time.monotonic() + 2.0
            while time.monotonic() - last_new < quiet_s:
                batches = await consumer.getmany(timeout_ms=200)
                for recs in batches.values():
                    got += [(r.partition, r.offset, r.value) for r in recs]
                    last_new = time.monotonic()
            return [v for _, _, v in sorted(got)]
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), 60))


def forge_hanging_transaction(bootstrap: str, topic: str, partition: int, producer_id: int,
                              age_ms: int = 3_600_000) -> int:
    """Leave a *hanging* transaction on a partition: a transactional batch from a producer id no
    coordinator knows (as a producer whose coordinator lost its state, or a late write after the
    transaction ended, would leave), written ``age_ms`` ago by its timestamp. Nothing will ever end
    it, so the partition's LSO stays at its offset, which is returned."""
    from helpers import RawConnection

    from strom.records.batch import TRANSACTIONAL_MASK
    from strom.records.codec import build_batch

    written = time.time_ns() // 1_000_000 - age_ms
    batch = build_batch([(None, b"left open")], timestamp_ms=written, producer_id=producer_id, producer_epoch=0,
                        base_sequence=0, attributes_extra=TRANSACTIONAL_MASK)
    with RawConnection(bootstrap) as conn:
        answer = conn.produce(topic, partition, batch)
    assert int(answer.error_code) == 0, answer
    return int(answer.base_offset)
