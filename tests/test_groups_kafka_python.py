"""Consumer groups with kafka-python: three members share a topic, a second group gets it all, commits."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_produce, wait_until
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from test_groups_common import create_topics, group_broker_fixture, values


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


def _consumer(bootstrap: str, group: str, **kw: Any) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                         consumer_timeout_ms=1000, **kw)


def _subscribe(consumer: KafkaConsumer, topic: str) -> None:
    """Subscribe once the topic's partitions are known. Otherwise a leader may assign without them
    and rejoin when they arrive, and kafka-python 3.0.12 sometimes never heartbeats again after
    such a metadata-triggered rejoin (the broker answers every request, as request logs show: the
    member just goes quiet until its session times out)."""
    wait_until(lambda: consumer.partitions_for_topic(topic), 20, what=f"metadata for {topic}")
    consumer.subscribe([topic])


class Member(threading.Thread):
    """One kafka-python consumer polling in its own thread (as applications run them)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = _consumer(bootstrap, group)
        _subscribe(self.consumer, topic)
        self.records: list[tuple[int, int]] = []
        self.assignment: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for batch in self.consumer.poll(timeout_ms=100).values():
                    self.records.extend((r.partition, r.offset) for r in batch)
                self.assignment = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.consumer.close()


@pytest.mark.timeout(90)
def test_three_members_share_partitions_and_second_group_gets_everything(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"kp-share": 6})
    members = [Member(bs, "kp-share", "kp-share") for _ in range(3)]
    for m in members:
        m.start()
    try:
        wait_until(lambda: all(m.assignment for m in members) and sum(len(m.assignment) for m in members) == 6,
                   40, what="three members assigned")
        final = [set(m.assignment) for m in members]
        delivered = confluent_produce(bs, "kp-share", values(300))
        wait_until(lambda: sum(len(m.records) for m in members) >= 300, 30, what="all records")
        assert [m.assignment for m in members] == final  # no rebalance meanwhile
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(15)
    assert all(m.error is None for m in members), [m.error for m in members]
    assert set().union(*final) == set(range(6))
    assert all(not (final[a] & final[b]) for a in range(3) for b in range(a + 1, 3))
    everything = [r for m in members for r in m.records]
    assert max(Counter(everything).values()) == 1
    assert set(everything) == {(d.partition, d.offset) for d in delivered}

    other = _consumer(bs, "kp-share-2")
    _subscribe(other, "kp-share")
    got = [(r.partition, r.offset) for r in other]  # iterates until consumer_timeout_ms of silence
    other.close()
    assert sorted(got) == sorted(everything)


@pytest.mark.timeout(60)
def test_commit_with_metadata_and_resume(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"kp-commit": 2})
    delivered = confluent_produce(bs, "kp-commit", values(40))
    c = _consumer(bs, "kp-commit")
    _subscribe(c, "kp-commit")
    first = []
    for r in c:
        first.append(r)
        if len(first) == 15:
            break
    last: dict[int, int] = {}
    for r in first:
        last[r.partition] = r.offset + 1
    c.commit({TopicPartition("kp-commit", p): OffsetAndMetadata(o, "kp-meta", -1) for p, o in last.items()})
    c.close()

    c = _consumer(bs, "kp-commit")
    for p, o in last.items():
        committed = c.committed(TopicPartition("kp-commit", p), metadata=True)
        assert (committed.offset, committed.metadata) == (o, "kp-meta")
    _subscribe(c, "kp-commit")
    rest = list(c)
    c.close()
    assert len(first) + len(rest) == 40
    assert {(r.partition, r.offset) for r in first + rest} == {(d.partition, d.offset) for d in delivered}
