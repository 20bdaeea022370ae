"""Share groups (KIP-932) with confluent-kafka's ShareConsumer over TCP: records shared out one at a
time among any number of members of one partition, acknowledged one by one (ACCEPT, RELEASE,
REJECT), redelivered when a lock runs out or a member dies, archived at the delivery limit, each
share group getting every record beside a classic group, and acknowledgements that survive a
SIGKILL of the broker. Raw requests check what the client does not show (ListGroups, DeleteGroups,
ShareGroupDescribe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, die_with_parent_hook
from helpers import RawConnection, ms, request_class, wait_until
from test_broker_lifecycle import run_to_exit
from test_groups_common import create_topics

from strom.protocol.errors import ErrorCode as E

LOCK_MS = 5000
OVERRIDES = {
    # A short heartbeat so members join at once; the lock bounds lowered as Kafka's own tests do.
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "200",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": "2",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share") / "data", overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("GROUP", group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(15)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(15) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> Any:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
    c.subscribe([topic])
    return c


def poll_until(consumer: Any, done: Any, timeout: float = 30.0, on_message: Any = None) -> list[Any]:
    """Poll until ``done(messages so far)``; every message (or the bounded time runs out)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"gave up after {len(got)} messages"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m)
            if on_message is not None:
                on_message(m)
    return got


def topic_with(bootstrap: str, values: list[bytes], group: str) -> str:
    topic = fresh("t")
    create_topics(bootstrap, {topic: 1})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    if values:
        produce(bootstrap, topic, values)
    return topic


# --- sharing ------------------------------------------------------------------------------------

def test_three_consumers_share_one_partition_and_each_record_is_delivered_once(broker: BrokerProcess) -> None:
    group = fresh("g")
    n = 60
    topic = topic_with(broker.bootstrap, [f"v{i}".encode() for i in range(n)], group)
    # Each holds its first records unacknowledged until all three have some: what one holds the
    # others cannot get, so each gets a share of the one partition.
    first = threading.Barrier(3, timeout=30)
    delivered: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def member(name: str) -> None:
        from confluent_kafka import AcknowledgeType

        c = share_consumer(broker.bootstrap, group, topic, **{"client.id": name, "max.poll.records": 5,
                                                               "share.acknowledgement.mode": "explicit"})
        try:
            waited = False
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                with lock:
                    if len(delivered) >= n:
                        break
                msgs = [m for m in c.poll(0.5) if m.error() is None]
                with lock:
                    delivered.extend((name, m.offset(), m.delivery_count()) for m in msgs)
                if msgs and not waited:
                    first.wait()
                    waited = True
                for m in msgs:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if msgs:
                    c.commit_sync(15)
        except BaseException as e:  # reported to the test thread
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    offsets = Counter(o for _, o, _ in delivered)
    assert sorted(offsets) == list(range(n)) and set(offsets.values()) == {1}, offsets
    assert {name for name, _, _ in delivered} == {"m0", "m1", "m2"}
    assert all(count == 1 for _, _, count in delivered)


def test_release_redelivers_with_delivery_count_2_then_the_limit_archives(broker: BrokerProcess) -> None:
    from confluent_kafka import AcknowledgeType

    group = fresh("g")
    topic = topic_with(broker.bootstrap, [b"job"], group)
    c = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        for attempt in (1, 2):
            [m] = poll_until(c, lambda got: len(got) >= 1)
            assert (m.offset(), m.value(), m.delivery_count()) == (0, b"job", attempt)
            c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(15)
        # Delivered twice with group.share.delivery.count.limit=2: archived. A later record comes;
        # the released one never again.
        produce(broker.bootstrap, topic, [b"after"])
        got = poll_until(c, lambda got: any(m.value() == b"after" for m in got))
        assert [(m.offset(), m.value(), m.delivery_count()) for m in got] == [(1, b"after", 1)]
        c.acknowledge(got[0], AcknowledgeType.ACCEPT)
        c.commit_sync(15)
    finally:
        c.close()


def test_reject_is_never_redelivered(broker: BrokerProcess) -> None:
    from confluent_kafka import AcknowledgeType

    group = fresh("g")
    topic = topic_with(broker.bootstrap, [b"poison", b"fine"], group)
    c = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        got = poll_until(c, lambda got: len(got) >= 2)
        assert [m.value() for m in got] == [b"poison", b"fine"]
        c.acknowledge(got[0], AcknowledgeType.REJECT)
        c.acknowledge(got[1], AcknowledgeType.ACCEPT)
        c.commit_sync(15)
        produce(broker.bootstrap, topic, [b"later"])
        again = poll_until(c, lambda got: any(m.value() == b"later" for m in got))
        assert [m.value() for m in again] == [b"later"]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync(15)
    finally:
        c.close()


def test_records_held_past_their_lock_go_to_another_member_not_before(broker: BrokerProcess) -> None:
    from confluent_kafka import AcknowledgeType

    group = fresh("g")
    topic = topic_with(broker.bootstrap, [b"a", b"b", b"c"], group)
    set_group_configs(broker.bootstrap, group, {"share.record.lock.duration.ms": str(LOCK_MS)})
    holder = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    other = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        started = time.monotonic()
        held = poll_until(holder, lambda got: len(got) >= 3)
        assert [m.offset() for m in held] == [0, 1, 2]
        since = len(broker.log_lines)
        # Within the lock the other member is served (a record produced now reaches it) but gets
        # none of the held ones.
        produce(broker.bootstrap, topic, [b"fresh"])
        fresh_ = poll_until(other, lambda got: any(m.value() == b"fresh" for m in got))
        assert time.monotonic() - started < LOCK_MS / 1000, "too slow to show the window"
        assert [m.offset() for m in fresh_] == [3]
        other.acknowledge(fresh_[0], AcknowledgeType.ACCEPT)
        other.commit_sync(15)
        # Then the lock runs out and the held records go to the other member, delivered twice.
        again = poll_until(other, lambda got: len(got) >= 3)
        assert time.monotonic() - started >= LOCK_MS / 1000
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2), (1, 2), (2, 2)]
        broker.wait_for_log("released after their acquisition lock", since=since)
        for m in again:
            other.acknowledge(m, AcknowledgeType.ACCEPT)
        other.commit_sync(15)
    finally:
        other.close()
        holder.close()


CHILD = """
import json, sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic = sys.argv[1:4]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    msgs = [m for m in c.poll(0.5) if m.error() is None]
    if msgs:
        print(json.dumps([m.offset() for m in msgs]), flush=True)
        time.sleep(600)  # holds them, never acknowledging, until killed
"""


def test_a_sigkilled_members_records_come_back(broker: BrokerProcess) -> None:
    from confluent_kafka import AcknowledgeType

    group = fresh("g")
    topic = topic_with(broker.bootstrap, [b"x", b"y"], group)
    child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, group, topic], stdout=subprocess.PIPE,
                             text=True, preexec_fn=die_with_parent_hook(), env={**os.environ})
    try:
        line = child.stdout.readline() if child.stdout is not None else ""
        assert json.loads(line) == [0, 1]
        since = len(broker.log_lines)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        broker.wait_for_log("lost its connection", "2 records", since=since)
        c = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
        try:
            got = poll_until(c, lambda got: len(got) >= 2)
            assert [(m.offset(), m.delivery_count()) for m in got] == [(0, 2), (1, 2)]
            for m in got:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(15)
        finally:
            c.close()
    finally:
        if child.poll() is None:
            child.kill()


def test_two_share_groups_each_get_every_record_beside_a_classic_group(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    g1, g2 = fresh("g"), fresh("g")
    values = [f"r{i}".encode() for i in range(20)]
    topic = topic_with(broker.bootstrap, values, g1)
    set_group_configs(broker.bootstrap, g2, {"share.auto.offset.reset": "earliest"})
    for group in (g1, g2):
        c = share_consumer(broker.bootstrap, group, topic)
        try:
            got = poll_until(c, lambda got: len(got) >= 20)
            assert [m.value() for m in got] == values
            c.commit_sync(15)  # implicit mode: what the last poll returned is accepted
        finally:
            c.close()
    classic_group = fresh("classic")
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic_group,
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 20 and time.monotonic() < deadline:
            m = classic.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert seen == values
        classic.commit(asynchronous=False)
    finally:
        classic.close()
    with RawConnection(broker.bootstrap) as conn:
        listed = conn.request(16, 5, request_class("list_groups", 5, "ListGroupsRequest")(
            states_filter=(), types_filter=()))
        types = {g.group_id: (g.group_type, g.protocol_type, g.group_state) for g in listed.groups}
        assert types[g1] == ("share", "share", "Empty") and types[classic_group][0] == "classic"
        only_share = conn.request(16, 5, request_class("list_groups", 5, "ListGroupsRequest")(
            states_filter=(), types_filter=("share",)))
        assert {g.group_id for g in only_share.groups} >= {g1, g2}
        assert classic_group not in {g.group_id for g in only_share.groups}
        described = conn.request(77, 1, request_class("share_group_describe", 1, "ShareGroupDescribeRequest")(
            group_ids=(g1, classic_group), include_authorized_operations=False))
        share_desc, classic_desc = described.groups
        assert (share_desc.error_code, share_desc.group_state, share_desc.assignor_name) == (E.none, "Empty", "simple")
        assert classic_desc.error_code == E.group_id_not_found
        deleted = conn.request(42, 2, request_class("delete_groups", 2, "DeleteGroupsRequest")(groups_names=(g1,)))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(g1, E.none)]
        after = conn.request(16, 5, request_class("list_groups", 5, "ListGroupsRequest")(
            states_filter=(), types_filter=("share",)))
        assert g1 not in {g.group_id for g in after.groups}


def test_share_group_heartbeat_and_describe_show_members(broker: BrokerProcess) -> None:
    group = fresh("g")
    topic = topic_with(broker.bootstrap, [], group)
    c = share_consumer(broker.bootstrap, group, topic, **{"client.id": "worker-1"})
    try:
        def stable() -> Any:
            c.poll(0.2)
            with RawConnection(broker.bootstrap) as conn:
                d = conn.request(77, 1, request_class("share_group_describe", 1, "ShareGroupDescribeRequest")(
                    group_ids=(group,), include_authorized_operations=False)).groups[0]
            return d if d.group_state == "Stable" and d.members and d.members[0].assignment.topic_partitions else None
        d = wait_until(stable, 20, what="a stable share group with its member")
        [member] = d.members
        assert member.client_id == "worker-1" and list(member.subscribed_topic_names) == [topic]
        assert [(tp.topic_name, list(tp.partitions)) for tp in member.assignment.topic_partitions] == [(topic, [0])]
        with RawConnection(broker.bootstrap) as conn:
            # One id, one type: a ConsumerGroupHeartbeat for a share group is refused.
            r = conn.request(68, 0, request_class("consumer_group_heartbeat", 0, "ConsumerGroupHeartbeatRequest")(
                group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout=ms(60000), subscribed_topic_names=(topic,), server_assignor=None,
                topic_partitions=()))
            assert r.error_code == E.group_id_not_found
    finally:
        c.close()


def test_group_configs_are_validated(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException

    for configs in ({"share.auto.offset.reset": "sometimes"}, {"share.record.lock.duration.ms": "999999"},
                    {"no.such.group.config": "1"}):
        with pytest.raises(KafkaException) as e:
            set_group_configs(broker.bootstrap, fresh("g"), configs)
        assert "INVALID_CONFIG" in str(e.value) or "InvalidConfig" in str(e.value) or "invalid" in str(e.value).lower()


@pytest.mark.parametrize("key,value", [("group.share.record.lock.duration.ms", "100"),
                                       ("group.share.delivery.count.limit", "11"),
                                       ("share.coordinator.state.topic.replication.factor", "0")])
def test_bad_share_settings_stop_the_broker_with_one_line(tmp_path: Path, key: str, value: str) -> None:
    rc, lines = run_to_exit(BrokerProcess(tmp_path / "data", overrides={key: value}))
    assert rc != 0 and len(lines) == 1 and key in lines[0], lines


# --- durability ---------------------------------------------------------------------------------

def test_acknowledged_records_survive_a_broker_sigkill(tmp_path: Path) -> None:
    from confluent_kafka import AcknowledgeType

    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    try:
        group = fresh("g")
        topic = topic_with(b.bootstrap, [f"v{i}".encode() for i in range(20)], group)
        acker = share_consumer(b.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit",
                                                              "max.poll.records": 10})
        holder = share_consumer(b.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit",
                                                               "max.poll.records": 5})
        acked = poll_until(acker, lambda got: len(got) >= 10)
        for m in acked:
            acker.acknowledge(m, AcknowledgeType.ACCEPT)
        assert all(v is None for v in acker.commit_sync(15).values())  # written before this answer
        held = poll_until(holder, lambda got: len(got) >= 5)  # in flight, never acknowledged
        acked_offsets = {m.offset() for m in acked}
        held_offsets = {m.offset() for m in held}
        assert not acked_offsets & held_offsets
        b.kill()
        b.restart()
        c = share_consumer(b.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
        try:
            got = poll_until(c, lambda got: len(got) >= 10, timeout=40)
            offsets = [m.offset() for m in got]
            assert sorted(offsets) == sorted(set(range(20)) - acked_offsets)  # none acknowledged comes back
            assert held_offsets <= set(offsets)  # those in flight do
            for m in got:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(15)
        finally:
            c.close()
        for consumer in (acker, holder):
            consumer.close()
    finally:
        b.stop()
