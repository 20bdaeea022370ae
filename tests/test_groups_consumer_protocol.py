"""Kafka 4's consumer group protocol (KIP-848) with confluent-kafka (`group.protocol=consumer`) and raw
requests: server-side assignment (uniform and range), incremental rebalances that never revoke a
partition that does not move, members that leave or die, member epochs on commits, and the
group.consumer.* broker properties."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import READY_MARK, BrokerProcess
from helpers import RawConnection, confluent_admin, confluent_produce, ms, request_class, wait_until
from test_broker_lifecycle import run_to_exit
from test_groups_common import ConsumerProcess, create_topics, poll_all, values

from strom.protocol.errors import ErrorCode as E

HEARTBEAT_MS = 300
SESSION_MS = 4000
CG_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    # Members learn of a new assignment at their next heartbeat; a dead one is noticed after the
    # session timeout. Both short here, within the min/max this broker allows.
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
}
CG_CONSUMER: dict[str, Any] = {
    "group.protocol": "consumer",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}

CGH, CG_DESCRIBE, OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, JOIN_GROUP = 68, 69, 8, 9, 16, 15, 11


@pytest.fixture(scope="module")
def cgbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", overrides=CG_BROKER_OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


class Member:
    """An in-process consumer-protocol member that records its incremental assign/revoke callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **config: Any) -> None:
        from confluent_kafka import Consumer

        self.name = name
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                  **CG_CONSUMER, **config})
        self.owned: set[int] = set()
        self.revoked: list[int] = []
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke)

    def _assign(self, _c: Any, parts: list[Any]) -> None:
        self.owned |= {p.partition for p in parts}

    def _revoke(self, _c: Any, parts: list[Any]) -> None:
        self.revoked.extend(p.partition for p in parts)
        self.owned -= {p.partition for p in parts}

    def poll(self, timeout: float) -> Any:
        return self.consumer.poll(timeout)

    def close(self) -> None:
        self.consumer.close()


class Tally:
    """Records seen by the members, each committed (synchronously) as it is processed.

    A commit sent while the member's epoch moves on (its heartbeat's answer crossed the commit)
    gets STALE_MEMBER_EPOCH, as from Kafka 4.0; like Kafka's Java consumer, the commit is sent again
    once the client has its new epoch. It is still before any revocation: callbacks run in poll."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[int, int]] = Counter()
        self.values: Counter[bytes] = Counter()
        self.stale_commits = 0

    def __call__(self, members: list[Member]) -> Any:
        from confluent_kafka import KafkaError, KafkaException

        def on_message(i: int, msg: Any) -> None:
            self.seen[(msg.partition(), msg.offset())] += 1
            self.values[msg.value()] += 1
            deadline = time.monotonic() + 10
            while True:
                try:
                    members[i].consumer.commit(message=msg, asynchronous=False)
                    return
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                        raise
                    self.stale_commits += 1
                    time.sleep(0.05)  # the client learns its new epoch from its next heartbeat
        return on_message


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def _balanced(members: list[Member], sizes: list[int]) -> bool:
    owned = [m.owned for m in members]
    union: set[int] = set().union(*owned)
    return sorted(len(o) for o in owned) == sorted(sizes) and len(union) == sum(sizes)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_four_members_split_twelve_partitions_and_consume_everything_once(
        cgbroker: BrokerProcess, assignor: str) -> None:
    bs, topic, group = cgbroker.bootstrap, f"cg-split-{assignor}", f"cg-split-{assignor}"
    create_topics(bs, {topic: 12})
    confluent_produce(bs, topic, [{**v, "partition": i % 12} for i, v in enumerate(values(120))])
    members = [Member(bs, group, topic, f"m{i}", **{"group.remote.assignor": assignor}) for i in range(4)]
    tally = Tally()
    try:
        poll_all(members, lambda: _balanced(members, [3, 3, 3, 3]) and len(tally.seen) >= 120, 60,
                 tally(members), "four members with 3 partitions each, 120 records")
        confluent_produce(bs, topic, [{**v, "partition": i % 12} for i, v in enumerate(values(120, 120))])
        poll_all(members, lambda: len(tally.seen) >= 240, 30, tally(members), "240 records")
        assert all(len(m.owned) == 3 for m in members), [m.owned for m in members]
        # AdminClient describes it through ConsumerGroupDescribe, and lists it as a consumer group.
        from confluent_kafka import ConsumerGroupState, ConsumerGroupType

        admin = confluent_admin(bs)
        d = admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert (d.state, d.type, d.partition_assignor) == (ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER,
                                                           assignor)
        assert sorted((m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                      for m in d.members) == sorted((m.name, sorted(m.owned)) for m in members)
        listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20).valid
        assert [(g.state, g.type) for g in listed if g.group_id == group] == [
            (ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER)]
        if assignor == "range":  # range: each member a contiguous run of the partitions
            assert sorted(tuple(sorted(m.owned)) for m in members) == [
                (0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)]
    finally:
        for m in members:
            m.close()
    assert max(tally.seen.values()) == 1 and len(tally.seen) == 240
    assert set(tally.values) == {f"v{i}".encode() for i in range(240)} and max(tally.values.values()) == 1
    assert _committed(bs, group, topic, 12) == {p: 20 for p in range(12)}


@pytest.mark.timeout(120)
def test_a_fifth_member_moves_only_the_partitions_it_takes(cgbroker: BrokerProcess) -> None:
    bs, topic, group = cgbroker.bootstrap, "cg-fifth", "cg-fifth"
    create_topics(bs, {topic: 12})
    members = [Member(bs, group, topic, f"m{i}") for i in range(4)]
    tally = Tally()
    stop = threading.Event()
    produced: list[int] = []

    def produce() -> None:
        n = 0
        while not stop.is_set() and n < 3000:
            confluent_produce(bs, topic, [{**v, "partition": i % 12} for i, v in enumerate(values(60, n))])
            n += 60
            produced.append(n)
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        poll_all(members, lambda: _balanced(members, [3, 3, 3, 3]), 60, tally(members), "four members, 3 each")
        before = [set(m.owned) for m in members]
        for m in members:
            m.revoked.clear()
        producer.start()
        wait_until(lambda: len(produced) >= 3, 20, what="records being produced")
        members.append(Member(bs, group, topic, "m4"))
        poll_all(members, lambda: _balanced(members, [3, 3, 2, 2, 2]), 60, tally(members),
                 "five members, 12 partitions")
        stop.set()
        producer.join(30)
        total = produced[-1]
        poll_all(members, lambda: len(tally.seen) >= total, 30, tally(members), f"{total} records")
        fifth = members[4].owned
        for m, had in zip(members[:4], before, strict=True):
            # What a member kept was never revoked; what it lost is what the fifth took.
            assert set(m.revoked) == had - m.owned, (m.name, had, m.owned, m.revoked)
            assert m.owned <= had
            assert set(m.revoked) <= fifth
        assert set().union(*(m.revoked for m in members[:4])) == fifth and not members[4].revoked
    finally:
        stop.set()
        for m in members:
            m.close()
    assert max(tally.seen.values()) == 1, [k for k, n in tally.seen.items() if n > 1][:10]
    assert set(tally.values) == {f"v{i}".encode() for i in range(total)}


@pytest.mark.timeout(120)
def test_a_closed_member_and_a_killed_member_lose_their_partitions(cgbroker: BrokerProcess) -> None:
    bs, topic, group = cgbroker.bootstrap, "cg-leave", "cg-leave"
    create_topics(bs, {topic: 6})
    procs = [ConsumerProcess(bs, group, topic, f"p{i}", base=CG_CONSUMER) for i in range(3)]
    try:
        wait_until(lambda: sorted(len(p.assignment()) for p in procs) == [2, 2, 2], 60, what="2 partitions each")
        confluent_produce(bs, topic, [{**v, "partition": i % 6} for i, v in enumerate(values(60))])
        wait_until(lambda: sum(len(p.committed_ok()) for p in procs) >= 60, 30, what="60 records committed")

        # A member that closes leaves the group (epoch -1): the others take its partitions at once.
        procs[0].close()
        t0 = time.monotonic()
        wait_until(lambda: sorted(len(p.assignment()) for p in procs[1:]) == [3, 3], 20,
                   what="the closed member's partitions move")
        assert time.monotonic() - t0 < SESSION_MS / 1000, "the leave should not wait for the session timeout"

        # A member that is SIGKILLed says nothing: its partitions move after the session timeout.
        victim, survivor = procs[1], procs[2]
        lost = victim.assignment()
        victim.kill()
        t0 = time.monotonic()
        wait_until(lambda: survivor.assignment() == set(range(6)), SESSION_MS / 1000 + 20,
                   what="the killed member's partitions move")
        waited = time.monotonic() - t0
        assert waited >= SESSION_MS / 1000 - 1.0, f"moved after {waited:.1f}s, before the session timeout"
        confluent_produce(bs, topic, [{**v, "partition": i % 6} for i, v in enumerate(values(60, 60))])
        wait_until(lambda: len(survivor.committed_ok() | procs[0].committed_ok() | victim.committed_ok()) >= 120,
                   30, what="every record committed")
        # The survivor resumed the killed member's partitions at their committed offsets.
        resumed = {(p, o) for p, o in survivor.processed() if p in lost}
        assert {o for _p, o in resumed} >= set(range(10, 20))
        assert not resumed & victim.committed_ok()
    finally:
        for p in procs:
            p.close()


def _heartbeat(conn: RawConnection, version: int = 1, **fields: Any) -> Any:
    cls = request_class("consumer_group_heartbeat", version, "ConsumerGroupHeartbeatRequest")
    tp_cls = request_class("consumer_group_heartbeat", version, "TopicPartitions")
    owned = fields.pop("owned", None)
    body = cls(topic_partitions=None if owned is None else tuple(
        tp_cls(topic_id=t, partitions=tuple(ps)) for t, ps in owned.items()), **fields)
    return conn.request(CGH, version, body)


def _commit_v9(conn: RawConnection, group: str, member_id: str, epoch: int, topic: str, offset: int,
               version: int = 9) -> Any:
    req = request_class("offset_commit", version, "OffsetCommitRequest")
    t = request_class("offset_commit", version, "OffsetCommitRequestTopic")
    p = request_class("offset_commit", version, "OffsetCommitRequestPartition")
    return conn.request(OFFSET_COMMIT, version, req(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, group_instance_id=None,
        topics=(t(name=topic, partitions=(p(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                            committed_metadata=""),)),)))


def _fetch_v9(conn: RawConnection, group: str, member_id: str | None, epoch: int, topic: str) -> Any:
    req = request_class("offset_fetch", 9, "OffsetFetchRequest")
    g = request_class("offset_fetch", 9, "OffsetFetchRequestGroup")
    t = request_class("offset_fetch", 9, "OffsetFetchRequestTopics")
    return conn.request(OFFSET_FETCH, 9, req(groups=(g(group_id=group, member_id=member_id, member_epoch=epoch,
                                                       topics=(t(name=topic, partition_indexes=(0,)),)),),
                                             require_stable=False)).groups[0]


def test_raw_heartbeats_epochs_and_commits(cgbroker: BrokerProcess) -> None:
    bs, topic, group = cgbroker.bootstrap, "cg-raw", "cg-raw"
    create_topics(bs, {topic: 2})
    member_id = str(uuid.uuid4())
    with RawConnection(bs) as conn:
        topic_id = conn.topic_id(topic)
        joined = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout=ms(30000),
                            subscribed_topic_names=(topic,), owned={})
        assert joined.error_code == E.none, joined
        assert joined.member_id == member_id and joined.member_epoch >= 1
        assert joined.heartbeat_interval == ms(HEARTBEAT_MS)
        assert joined.assignment is not None
        assert {(tp.topic_id, tuple(tp.partitions)) for tp in joined.assignment.topic_partitions} == {
            (topic_id, (0, 1))}
        epoch = joined.member_epoch

        # Stays: same epoch, nothing new to say.
        again = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=epoch,
                           owned={topic_id: [0, 1]})
        assert again.error_code == E.none and again.member_epoch == epoch and again.assignment is None

        fenced = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=epoch + 5)
        assert fenced.error_code == E.fenced_member_epoch, fenced
        unknown = _heartbeat(conn, group_id=group, member_id=str(uuid.uuid4()), member_epoch=epoch)
        assert unknown.error_code == E.unknown_member_id, unknown

        # Commits carry the member epoch: the current one is taken, a stale one changes nothing.
        ok = _commit_v9(conn, group, member_id, epoch, topic, 7)
        assert ok.topics[0].partitions[0].error_code == E.none
        stale = _commit_v9(conn, group, member_id, epoch - 1, topic, 99)
        assert stale.topics[0].partitions[0].error_code == E.stale_member_epoch
        stranger = _commit_v9(conn, group, "nobody", epoch, topic, 99)
        assert stranger.topics[0].partitions[0].error_code == E.unknown_member_id
        # v8 cannot carry the member epoch: a member of a consumer-protocol group must use v9+.
        old = _commit_v9(conn, group, member_id, epoch, topic, 99, version=8)
        assert old.topics[0].partitions[0].error_code == E.unsupported_version
        fetched = _fetch_v9(conn, group, member_id, epoch, topic)
        assert fetched.error_code == E.none and fetched.topics[0].partitions[0].committed_offset == 7
        assert _fetch_v9(conn, group, member_id, epoch - 1, topic).error_code == E.stale_member_epoch
        assert _fetch_v9(conn, group, "nobody", epoch, topic).error_code == E.unknown_member_id
        assert _fetch_v9(conn, group, None, -1, topic).topics[0].partitions[0].committed_offset == 7

        # The group is listed as a consumer group; DescribeGroups (the classic API) does not describe it.
        listed = conn.request(LIST_GROUPS, 5, request_class("list_groups", 5, "ListGroupsRequest")(
            states_filter=(), types_filter=()))
        mine = [g for g in listed.groups if g.group_id == group]
        assert [(g.protocol_type, g.group_type, g.group_state) for g in mine] == [("consumer", "consumer", "Stable")]
        described = conn.request(DESCRIBE_GROUPS, 6, request_class("describe_groups", 6, "DescribeGroupsRequest")(
            groups=(group,), include_authorized_operations=False)).groups[0]
        assert described.error_code == E.group_id_not_found and described.group_state == "Dead"
        assert described.error_message == f"Group {group} is not a classic group."  # Kafka 4's words
        old = conn.request(DESCRIBE_GROUPS, 5, request_class("describe_groups", 5, "DescribeGroupsRequest")(
            groups=(group,), include_authorized_operations=False)).groups[0]
        assert (old.error_code, old.group_state, old.members) == (E.none, "Dead", ())  # before v6: Dead, no error
        d = conn.request(CG_DESCRIBE, 1, request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert (d.error_code, d.group_state, d.assignor_name, d.assignment_epoch) == (
            E.none, "Stable", "uniform", d.group_epoch)
        (m,) = d.members
        assert (m.member_id, m.member_epoch, m.client_id, m.subscribed_topic_names, m.member_type) == (
            member_id, epoch, "strom-tests", (topic,), 1)
        assert [(tp.topic_id, tp.topic_name, tuple(tp.partitions)) for tp in m.assignment.topic_partitions] == [
            (topic_id, topic, (0, 1))]
        assert m.target_assignment == m.assignment
        # A classic JoinGroup is the consumer group's now (online migration): without a protocol
        # it is inconsistent with the group.
        join = conn.request(JOIN_GROUP, 9, request_class("join_group", 9, "JoinGroupRequest")(
            group_id=group, session_timeout=ms(10000), rebalance_timeout=ms(10000), member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=(), reason=None))
        assert join.error_code == E.inconsistent_group_protocol

        left = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=-1)
        assert left.error_code == E.none and left.member_epoch == -1
        gone = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=epoch)
        assert gone.error_code == E.unknown_member_id
        # Empty now: a commit without a member is taken (admin tools), the offsets stay.
        assert _commit_v9(conn, group, "", -1, topic, 8).topics[0].partitions[0].error_code == E.none
        assert _fetch_v9(conn, group, None, -1, topic).topics[0].partitions[0].committed_offset == 8

        bad = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout=ms(30000),
                         subscribed_topic_names=(topic,), owned={}, server_assignor="sticky")
        assert bad.error_code == E.unsupported_assignor
        assert _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=0,
                          subscribed_topic_names=(topic,), owned={}).error_code == E.invalid_request


def test_a_classic_group_with_members_is_not_taken_over(cgbroker: BrokerProcess) -> None:
    """Only a join (member epoch 0) may upgrade a classic group (tests/test_groups_migration.py);
    any other heartbeat finds no consumer group, and ConsumerGroupDescribe does not describe it."""
    from confluent_kafka import Consumer

    bs, topic, group = cgbroker.bootstrap, "cg-classic", "cg-classic"
    create_topics(bs, {topic: 1})
    classic = Consumer({"bootstrap.servers": bs, "group.id": group, "session.timeout.ms": 6000})
    classic.subscribe([topic])
    try:
        poll_all([classic], lambda: bool(classic.assignment()), 30, lambda i, m: None, "classic member assigned")
        with RawConnection(bs) as conn:
            r = _heartbeat(conn, group_id=group, member_id=str(uuid.uuid4()), member_epoch=1)
        assert r.error_code == E.group_id_not_found, r
        with RawConnection(bs) as conn:
            d = conn.request(CG_DESCRIBE, 1, request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")(
                group_ids=(group, "cg-nobody"), include_authorized_operations=False))
        assert [(g.group_id, g.error_code) for g in d.groups] == [
            (group, E.group_id_not_found), ("cg-nobody", E.group_id_not_found)]
    finally:
        classic.close()


def test_consumer_group_settings_are_described_with_kafka_defaults(tmp_path: Path) -> None:
    from confluent_kafka.admin import ConfigResource

    b = BrokerProcess(tmp_path / "data").start()
    try:
        admin = confluent_admin(b.bootstrap)
        (f,) = admin.describe_configs([ConfigResource("broker", "0")], request_timeout=15).values()
        entries = f.result(timeout=20)
    finally:
        b.stop()
    assert {k: entries[k].value for k in entries if k.startswith("group.consumer.")} == {
        "group.consumer.session.timeout.ms": "45000",
        "group.consumer.min.session.timeout.ms": "45000",
        "group.consumer.max.session.timeout.ms": "60000",
        "group.consumer.heartbeat.interval.ms": "5000",
        "group.consumer.min.heartbeat.interval.ms": "5000",
        "group.consumer.max.heartbeat.interval.ms": "15000",
        "group.consumer.max.size": str(2**31 - 1),
        "group.consumer.assignors": "uniform,range",
        "group.consumer.migration.policy": "bidirectional",
    }


@pytest.mark.parametrize("overrides,key", [
    ({"group.consumer.session.timeout.ms": "30000"}, "group.consumer.session.timeout.ms"),
    ({"group.consumer.heartbeat.interval.ms": "20000"}, "group.consumer.heartbeat.interval.ms"),
    ({"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "5000"},
     "group.consumer.heartbeat.interval.ms"),  # 5000 is not below the session timeout
    ({"group.consumer.max.session.timeout.ms": "40000"}, "group.consumer.max.session.timeout.ms"),
    ({"group.consumer.assignors": "sticky"}, "group.consumer.assignors"),
    ({"group.consumer.max.size": "0"}, "group.consumer.max.size"),
])
def test_a_bad_consumer_group_setting_stops_the_broker_with_one_line(
        tmp_path: Path, overrides: dict[str, str], key: str) -> None:
    rc, lines = run_to_exit(BrokerProcess(tmp_path / "data", overrides=overrides))
    assert rc != 0
    assert len(lines) == 1, lines
    assert key in lines[0] and "Traceback" not in lines[0] and READY_MARK not in lines[0], lines[0]


@pytest.mark.timeout(60)
def test_group_max_size_is_enforced(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"group.consumer.max.size": "1"}).start()
    try:
        create_topics(b.bootstrap, {"cg-max": 1})
        with RawConnection(b.bootstrap) as conn:
            codes = [_heartbeat(conn, group_id="cg-max", member_id=str(uuid.uuid4()), member_epoch=0,
                                rebalance_timeout=ms(30000), subscribed_topic_names=("cg-max",), owned={}).error_code
                     for _ in range(2)]
    finally:
        b.stop()
    assert codes == [E.none, E.group_max_size_reached]


@pytest.mark.timeout(120)
def test_a_regex_subscription_picks_up_a_topic_created_later(cgbroker: BrokerProcess) -> None:
    """The member sends its pattern (ConsumerGroupHeartbeat v1's SubscribedTopicRegex); the broker
    resolves it, and a matching topic created after the member joined is assigned to it."""
    bs, group = cgbroker.bootstrap, "cg-regex"
    first, later, other = "cg-rx-first", "cg-rx-later", "cg-rxno-other"
    create_topics(bs, {first: 2, other: 1})
    confluent_produce(bs, first, [{**v, "partition": i % 2} for i, v in enumerate(values(10))])
    confluent_produce(bs, other, values(5, 1000))
    member = Member(bs, group, r"^cg-rx-.*", "rx")
    tally = Tally()
    try:
        # (Tally.seen is keyed by partition and offset, which two topics share: count the values.)
        poll_all([member], lambda: len(tally.values) >= 10, 60, tally([member]), f"the records of {first}")
        with RawConnection(cgbroker.bootstrap) as conn:
            d = conn.request(CG_DESCRIBE, 1, request_class("consumer_group_describe", 1,
                                                           "ConsumerGroupDescribeRequest")(
                group_ids=(group,), include_authorized_operations=False)).groups[0]
        (m,) = d.members
        # The broker holds the pattern, not a list (librdkafka sends each pattern in parentheses,
        # several joined with |).
        assert m.subscribed_topic_regex == r"(^cg-rx-.*)" and m.subscribed_topic_names == ()
        assert {tp.topic_name for tp in m.assignment.topic_partitions} == {first}
        create_topics(bs, {later: 3})
        confluent_produce(bs, later, [{**v, "partition": i % 3} for i, v in enumerate(values(9, 100))])
        poll_all([member], lambda: len(tally.values) >= 19, 60, tally([member]), f"the records of {later}")
    finally:
        member.close()
    assert set(tally.values) == {f"v{i}".encode() for i in [*range(10), *range(100, 109)]}
    assert max(tally.values.values()) == 1
