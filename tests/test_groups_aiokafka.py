"""Consumer groups with aiokafka: three members share a topic, a second group gets it all, commits."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from brokerproc import BrokerProcess
from helpers import confluent_produce
from test_groups_common import create_topics, group_broker_fixture, values


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


def _consumer(bootstrap: str, group: str, *topics: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)


async def _until(predicate: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {what}")
        await asyncio.sleep(0.05)


async def _consume(consumer: AIOKafkaConsumer, sink: list[tuple[int, int]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=100)
        for batch in batches.values():
            sink.extend((r.partition, r.offset) for r in batch)


@pytest.mark.timeout(90)
def test_three_members_share_partitions_and_second_group_gets_everything(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"ak-share": 6})

    async def scenario() -> None:
        members = [_consumer(bs, "ak-share", "ak-share") for _ in range(3)]
        sinks: list[list[tuple[int, int]]] = [[], [], []]
        stop = asyncio.Event()
        for c in members:
            await c.start()
        tasks = [asyncio.create_task(_consume(c, s, stop)) for c, s in zip(members, sinks, strict=True)]

        def parts() -> list[set[int]]:
            return [{tp.partition for tp in c.assignment()} for c in members]

        try:
            await _until(lambda: all(parts()) and sum(len(p) for p in parts()) == 6, 40, "three members assigned")
            final = parts()
            delivered = await asyncio.to_thread(confluent_produce, bs, "ak-share", values(300))
            await _until(lambda: sum(len(s) for s in sinks) >= 300, 30, "all records")
            assert parts() == final
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            for c in members:
                await c.stop()
        assert set().union(*final) == set(range(6))
        assert all(not (final[a] & final[b]) for a in range(3) for b in range(a + 1, 3))
        everything = [r for s in sinks for r in s]
        assert max(Counter(everything).values()) == 1
        assert set(everything) == {(d.partition, d.offset) for d in delivered}

        other = _consumer(bs, "ak-share-2", "ak-share")
        await other.start()
        got: list[tuple[int, int]] = []
        stop2 = asyncio.Event()
        task = asyncio.create_task(_consume(other, got, stop2))
        try:
            await _until(lambda: len(got) >= 300, 30, "second group")
        finally:
            stop2.set()
            await task
            await other.stop()
        assert sorted(got) == sorted(everything)

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_commit_with_metadata_and_resume(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"ak-commit": 1})
    confluent_produce(bs, "ak-commit", values(30))
    tp = TopicPartition("ak-commit", 0)

    async def scenario() -> None:
        c = _consumer(bs, "ak-commit", "ak-commit")
        await c.start()
        first = []
        while len(first) < 10:
            first.append(await c.getone())
        await c.commit({tp: OffsetAndMetadata(first[-1].offset + 1, "ak-meta")})
        await c.stop()

        c = _consumer(bs, "ak-commit", "ak-commit")
        await c.start()
        try:
            assert await c.committed(tp) == first[-1].offset + 1
            nxt = await c.getone()
            assert nxt.offset == first[-1].offset + 1
        finally:
            await c.stop()

    asyncio.run(scenario())
