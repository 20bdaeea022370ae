"""Online migration between the classic and the consumer group protocol (Kafka 4.0) with real
confluent-kafka clients: classic members (group.protocol=classic) are joined by a
group.protocol=consumer member, the group becomes a consumer group and all three consume; the
consumer-protocol member closes and the group is classic again. No record is lost on the way and
committed offsets survive. group.consumer.migration.policy blocks a direction;
group.coordinator.rebalance.protocols turns the consumer protocol off."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import READY_MARK, BrokerProcess
from helpers import RawConnection, confluent_admin, confluent_produce, ms, request_class, wait_until
from test_broker_lifecycle import run_to_exit
from test_groups_common import ConsumerProcess, create_topics, values

from strom.protocol.errors import ErrorCode as E

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "3",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "4000",
}
CLASSIC: dict[str, Any] = {
    "group.protocol": "classic",
    "session.timeout.ms": 4000,
    "heartbeat.interval.ms": 300,
    "max.poll.interval.ms": 20000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}
CONSUMER: dict[str, Any] = {
    "group.protocol": "consumer",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}
PARTITIONS = 6


def start(tmp_path: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(tmp_path / "data", overrides={**OVERRIDES, **overrides}).start()


def group_type(bootstrap: str, group: str) -> str | None:
    """The group's type as ListGroups (v5) tells it: "classic", "consumer", or None if not listed."""
    admin = confluent_admin(bootstrap)  # held: a client destroyed early fails its futures
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20).valid
    return next((str(g.type.name).lower() for g in listed if g.group_id == group), None)


def split(members: list[ConsumerProcess], partitions: int = PARTITIONS) -> Callable[[], bool]:
    """Every member owns some partitions, no two the same one, and together all of them."""
    def check() -> bool:
        owned = [m.assignment() for m in members]
        return all(owned) and sum(map(len, owned)) == partitions and set().union(*owned) == set(range(partitions))
    return check


class Producer:
    """Produces numbered values round the partitions until stopped; ``sent`` is what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < 20_000:
            batch = [{**v, "partition": i % PARTITIONS} for i, v in enumerate(values(30, self.sent, prefix="p"))]
            confluent_produce(self.bootstrap, self.topic, batch)
            self.sent += 30
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.sent


def consumed(members: list[ConsumerProcess]) -> set[str]:
    return {e["v"] for m in members for e in m.snapshot() if e["ev"] == "rec"}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    with RawConnection(bootstrap) as conn:
        return {p: conn.log_end_offset(topic, p) for p in range(PARTITIONS)}


@pytest.fixture
def members() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    try:
        yield started
    finally:
        for m in started:
            m.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_classic_members_migrate_to_a_consumer_group_and_back(
        tmp_path: Path, members: list[ConsumerProcess], strategy: str) -> None:
    b = start(tmp_path)
    try:
        bs, topic, group = b.bootstrap, "mig", "mig"
        create_topics(bs, {topic: PARTITIONS})
        confluent_produce(bs, topic, [{**v, "partition": i % PARTITIONS} for i, v in enumerate(values(60))])
        classic = [ConsumerProcess(bs, group, topic, f"classic{i}", base=CLASSIC,
                                   **{"partition.assignment.strategy": strategy}) for i in range(2)]
        members.extend(classic)
        wait_until(split(classic), 60, what="two classic members, 3 partitions each")
        wait_until(lambda: len(consumed(classic)) >= 60, 30, what="the first 60 records")
        assert group_type(bs, group) == "classic"

        producer = Producer(bs, topic)
        wait_until(lambda: producer.sent >= 90, 20, what="records being produced")
        before = [(len(m.snapshot()), m.assignment()) for m in classic]
        modern = ConsumerProcess(bs, group, topic, "modern", base=CONSUMER)
        members.append(modern)
        b.wait_for_log("upgraded classic group mig ", "to a consumer group", timeout=30)
        wait_until(split([*classic, modern]), 60, what="three members (two classic), 2 partitions each")
        if strategy == "cooperative-sticky":
            # Incremental: a classic member gave up only what the new member took, kept the rest.
            for m, (seen, had) in zip(classic, before, strict=True):
                revoked = {p for e in m.snapshot()[seen:] if e["ev"] == "revoke" for p in e["parts"]}
                assert revoked == had - m.assignment() and revoked <= modern.assignment(), (m.name, had, revoked)
        assert group_type(bs, group) == "consumer"
        admin = confluent_admin(bs)
        d = admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert sorted(m.client_id for m in d.members) == ["classic0", "classic1", "modern"]
        mark = producer.sent
        wait_until(lambda: _all(mark) <= consumed(members), 30, what="the records produced so far, by the three")
        wait_until(lambda: consumed([modern]), 30, what="the consumer-protocol member consumes")

        # The consumer-protocol member leaves: the group is classic again, the classic members
        # share every partition between them and go on consuming.
        modern.close()
        b.wait_for_log("downgraded consumer group mig ", "to a classic group", timeout=30)
        wait_until(lambda: group_type(bs, group) == "classic", 20, what="ListGroups: classic")
        wait_until(split(classic), 60, what="the two classic members take every partition")
        total = producer.stop()
        wait_until(lambda: _all(total) <= consumed(members), 60, what=f"all {total + 60} records consumed")
        missing = _all(total) - consumed(members)
        assert not missing, sorted(missing)[:10]
        # Committed offsets survived both conversions: once everything is committed, each
        # partition's committed offset is its end.
        ends = end_offsets(bs, topic)
        wait_until(lambda: committed(bs, group, topic) == ends, 30, what="every record committed")
        # The conversions' writes (and the answers they carry) went through without a failure.
        assert not [line for line in b.log_lines if " ERROR " in line or "Traceback" in line]
    finally:
        b.stop()


def _all(produced: int) -> set[str]:
    """The 60 records from before the migration and the first ``produced`` of the producer's."""
    return {f"v{i}" for i in range(60)} | {f"p{i}" for i in range(produced)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_a_policy_without_upgrade_keeps_the_classic_group(
        tmp_path: Path, members: list[ConsumerProcess], policy: str) -> None:
    b = start(tmp_path, **{"group.consumer.migration.policy": policy})
    try:
        bs, topic, group = b.bootstrap, "noup", "noup"
        create_topics(bs, {topic: PARTITIONS})
        classic = ConsumerProcess(bs, group, topic, "classic", base=CLASSIC)
        members.append(classic)
        wait_until(lambda: classic.assignment() == set(range(PARTITIONS)), 60, what="the classic member assigned")
        members.append(ConsumerProcess(bs, group, topic, "modern", base=CONSUMER))
        b.wait_for_log("cannot upgrade classic group noup to a consumer group: online upgrade is disabled")
        assert group_type(bs, group) == "classic"
        confluent_produce(bs, topic, [{**v, "partition": i % PARTITIONS} for i, v in enumerate(values(30))])
        wait_until(lambda: len(consumed([classic])) >= 30, 30, what="the classic member consumes on")
        assert classic.assignment() == set(range(PARTITIONS))
    finally:
        b.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["disabled", "UPGRADE"])  # case-insensitive, as in Kafka
def test_a_policy_without_downgrade_keeps_the_consumer_group(
        tmp_path: Path, members: list[ConsumerProcess], policy: str) -> None:
    b = start(tmp_path, **{"group.consumer.migration.policy": policy})
    try:
        bs, topic, group = b.bootstrap, "nodown", "nodown"
        create_topics(bs, {topic: PARTITIONS})
        first, second = (CLASSIC, CONSUMER) if policy == "UPGRADE" else (CONSUMER, CLASSIC)
        one = ConsumerProcess(bs, group, topic, "one", base=first)
        members.append(one)
        wait_until(lambda: one.assignment() == set(range(PARTITIONS)), 60, what="the first member assigned")
        two = ConsumerProcess(bs, group, topic, "two", base=second)
        members.append(two)
        wait_until(split([one, two]), 60, what="two members share the partitions")
        assert group_type(bs, group) == "consumer"
        modern, classic = (two, one) if policy == "UPGRADE" else (one, two)
        modern.close()
        b.wait_for_log("cannot downgrade consumer group nodown to a classic group: online downgrade is disabled")
        wait_until(lambda: classic.assignment() == set(range(PARTITIONS)), 30,
                   what="the classic member takes every partition")
        assert group_type(bs, group) == "consumer"
        confluent_produce(bs, topic, [{**v, "partition": i % PARTITIONS} for i, v in enumerate(values(30))])
        wait_until(lambda: {f"v{i}" for i in range(30)} <= consumed([classic]), 30, what="the classic member consumes")
    finally:
        b.stop()


def test_without_the_consumer_protocol_its_apis_are_not_offered(tmp_path: Path) -> None:
    b = start(tmp_path, **{"group.coordinator.rebalance.protocols": "classic"})
    try:
        with RawConnection(b.bootstrap) as conn:
            offered = {k.api_key for k in conn.api_versions().api_keys}
            cls = request_class("consumer_group_heartbeat", 1, "ConsumerGroupHeartbeatRequest")
            r = conn.request(68, 1, cls(group_id="g", member_id="m", member_epoch=0, rebalance_timeout=ms(30000),
                                        subscribed_topic_names=("t",), topic_partitions=()))
            d = conn.request(69, 1, request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")(
                group_ids=("g",), include_authorized_operations=False))
    finally:
        b.stop()
    assert {11, 12, 14, 68, 69} & offered == {11, 12, 14}
    assert r.error_code == E.unsupported_version
    assert [g.error_code for g in d.groups] == [E.unsupported_version]


def test_the_settings_are_described_with_kafka_defaults(tmp_path: Path) -> None:
    from confluent_kafka.admin import ConfigResource

    b = BrokerProcess(tmp_path / "data").start()
    try:
        admin = confluent_admin(b.bootstrap)
        (f,) = admin.describe_configs([ConfigResource("broker", "0")], request_timeout=15).values()
        entries = f.result(timeout=20)
        with RawConnection(b.bootstrap) as conn:
            offered = {k.api_key for k in conn.api_versions().api_keys}
    finally:
        b.stop()
    assert entries["group.coordinator.rebalance.protocols"].value == "classic,consumer"
    assert entries["group.consumer.migration.policy"].value == "bidirectional"
    assert {68, 69} <= offered


@pytest.mark.parametrize("key,value", [
    ("group.consumer.migration.policy", "sideways"),
    ("group.coordinator.rebalance.protocols", "consumer"),  # classic cannot be turned off
    ("group.coordinator.rebalance.protocols", "classic,share"),
])
def test_a_bad_migration_setting_stops_the_broker_with_one_line(tmp_path: Path, key: str, value: str) -> None:
    rc, lines = run_to_exit(BrokerProcess(tmp_path / "data", overrides={key: value}))
    assert rc != 0
    assert len(lines) == 1, lines
    assert key in lines[0] and "Traceback" not in lines[0] and READY_MARK not in lines[0], lines[0]

