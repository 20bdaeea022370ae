"""The share-group admin APIs (KIP-932) against a broker process: DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) as raw requests (confluent-kafka's
AdminClient has no share-group calls), their effect on what confluent-kafka's ShareConsumer is
delivered next, and `strom groups list|describe|reset-offsets|delete-offsets` on a share group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from click.testing import CliRunner, Result
from helpers import RawConnection, request_class, wait_until
from test_groups_cli import table_rows
from test_share_groups import OVERRIDES, fresh, poll_until, produce, share_consumer, topic_with

from strom.cli.groups import groups
from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-admin") / "data", overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def describe_offsets(conn: RawConnection, group: str, topics: dict[str, list[int]] | None, version: int = 1) -> Any:
    cls = request_class("describe_share_group_offsets", version, "DescribeShareGroupOffsetsRequest")
    mod = __import__(f"kio.schema.describe_share_group_offsets.v{version}.request", fromlist=["x"])
    wanted = None if topics is None else tuple(
        mod.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps)) for t, ps in topics.items())
    [g] = conn.request(90, version, cls(groups=(mod.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=wanted),))).groups
    return g


def offsets_of(g: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error)"""
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in g.topics for p in t.partitions}


def alter(conn: RawConnection, group: str, offsets: dict[tuple[str, int], int]) -> Any:
    mod = __import__("kio.schema.alter_share_group_offsets.v0.request", fromlist=["x"])
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append((p, o))
    return conn.request(91, 0, mod.AlterShareGroupOffsetsRequest(group_id=group, topics=tuple(
        mod.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
            mod.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps))
        for t, ps in by_topic.items())))


def delete(conn: RawConnection, group: str, topics: list[str]) -> Any:
    mod = __import__("kio.schema.delete_share_group_offsets.v0.request", fromlist=["x"])
    return conn.request(92, 0, mod.DeleteShareGroupOffsetsRequest(group_id=group, topics=tuple(
        mod.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics)))


def consume_and_accept(bootstrap: str, group: str, topic: str, count: int, **config: Any) -> list[int]:
    """A member that takes ``count`` records, ACCEPTs them and leaves: their offsets, in order."""
    c = share_consumer(bootstrap, group, topic, **config)  # implicit mode: commit_sync accepts what poll gave
    try:
        got = poll_until(c, lambda got: len(got) >= count)
        c.commit_sync(15)
        return [m.offset() for m in got]
    finally:
        c.close()


def wait_empty(bootstrap: str, group: str) -> None:
    def empty() -> bool:
        with RawConnection(bootstrap) as conn:
            d = conn.request(77, 1, request_class("share_group_describe", 1, "ShareGroupDescribeRequest")(
                group_ids=(group,), include_authorized_operations=False)).groups[0]
        return d.group_state == "Empty"
    wait_until(empty, 20, what=f"share group {group} empty")


def test_describe_alter_and_delete_share_group_offsets(broker: BrokerProcess) -> None:
    group = fresh("g")
    topic = topic_with(broker.bootstrap, [f"v{i}".encode() for i in range(4)], group)
    assert consume_and_accept(broker.bootstrap, group, topic, 4) == [0, 1, 2, 3]
    produce(broker.bootstrap, topic, [f"v{i}".encode() for i in range(4, 10)])
    wait_empty(broker.bootstrap, group)
    with RawConnection(broker.bootstrap) as conn:
        # All the group's share partitions (topics null), and asked by name; v0 has no lag.
        assert offsets_of(describe_offsets(conn, group, None)) == {(topic, 0): (4, 6, E.none)}
        assert offsets_of(describe_offsets(conn, group, {topic: [0]})) == {(topic, 0): (4, 6, E.none)}
        assert describe_offsets(conn, group, {topic: [0]}, version=0).topics[0].partitions[0].start_offset == 4
        # Absence of data, not errors: a topic that does not exist, a group that does not exist.
        assert offsets_of(describe_offsets(conn, group, {"no-such-topic": [0]})) == {("no-such-topic", 0): (-1, -1, 0)}
        assert offsets_of(describe_offsets(conn, fresh("none"), {topic: [0]})) == {(topic, 0): (-1, -1, 0)}
        # Move the start forward: 4..6 are never delivered, 7.. are.
        r = alter(conn, group, {(topic, 0): 7, (topic, 5): 0, ("no-such-topic", 0): 1})
        assert r.error_code == E.none
        errors = {(t.topic_name, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert errors == {(topic, 0): E.none, (topic, 5): E.unknown_topic_or_partition,
                          ("no-such-topic", 0): E.unknown_topic_or_partition}
        assert offsets_of(describe_offsets(conn, group, None)) == {(topic, 0): (7, 3, E.none)}
    assert consume_and_accept(broker.bootstrap, group, topic, 3) == [7, 8, 9]
    wait_empty(broker.bootstrap, group)
    with RawConnection(broker.bootstrap) as conn:
        assert offsets_of(describe_offsets(conn, group, None)) == {(topic, 0): (10, 0, E.none)}
        # And back: records acknowledged before are delivered again from the new start.
        assert alter(conn, group, {(topic, 0): 2}).error_code == E.none
        assert offsets_of(describe_offsets(conn, group, None)) == {(topic, 0): (2, 8, E.none)}
    assert consume_and_accept(broker.bootstrap, group, topic, 8) == list(range(2, 10))
    wait_empty(broker.bootstrap, group)
    with RawConnection(broker.bootstrap) as conn:
        r = delete(conn, group, [topic, "no-such-topic"])
        assert r.error_code == E.none
        assert {(t.topic_name, t.error_code) for t in r.responses} == {
            (topic, E.none), ("no-such-topic", E.unknown_topic_or_partition)}
        assert offsets_of(describe_offsets(conn, group, None)) == {}
        assert offsets_of(describe_offsets(conn, group, {topic: [0]})) == {(topic, 0): (-1, -1, 0)}
    # No state: the share partition starts again where share.auto.offset.reset (earliest) says.
    assert consume_and_accept(broker.bootstrap, group, topic, 10) == list(range(10))


def test_alter_and_delete_refuse_a_non_empty_group_and_other_groups(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    group = fresh("g")
    topic = topic_with(broker.bootstrap, [b"a", b"b"], group)
    c = share_consumer(broker.bootstrap, group, topic)
    try:
        poll_until(c, lambda got: len(got) >= 2)
        with RawConnection(broker.bootstrap) as conn:
            r = alter(conn, group, {(topic, 0): 0})
            assert (r.error_code, r.responses) == (E.non_empty_group, ())
            assert delete(conn, group, [topic]).error_code == E.non_empty_group
            assert offsets_of(describe_offsets(conn, group, None))[(topic, 0)][0] == 0  # nothing changed
        c.commit_sync(15)
    finally:
        c.close()
    classic = fresh("classic")
    cc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic, "auto.offset.reset": "earliest"})
    try:
        cc.subscribe([topic])
        wait_until(lambda: (m := cc.poll(0.5)) is not None and m.error() is None, 30, what="a classic consumer")
        cc.commit(asynchronous=False)
    finally:
        cc.close()
    with RawConnection(broker.bootstrap) as conn:
        for g in (classic, fresh("none")):
            assert alter(conn, g, {(topic, 0): 0}).error_code == E.group_id_not_found
            assert delete(conn, g, [topic]).error_code == E.group_id_not_found


def strom_groups(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "250"}).invoke(groups, ["--bootstrap-server", broker.bootstrap, *args])


def test_strom_groups_on_a_share_group(broker: BrokerProcess) -> None:
    group = fresh("g")
    topic = topic_with(broker.bootstrap, [f"v{i}".encode() for i in range(5)], group)
    assert consume_and_accept(broker.bootstrap, group, topic, 5) == list(range(5))
    produce(broker.bootstrap, topic, [b"v5", b"v6", b"v7"])
    c = share_consumer(broker.bootstrap, group, topic, **{"client.id": "worker-1"})
    try:
        poll_until(c, lambda got: len(got) >= 3)  # held: a member with records in flight
        listed = strom_groups(broker, "list")
        assert listed.exit_code == 0, listed.output
        assert table_rows(listed.output, group) == [[group, "Stable", "share"]]
        shown = strom_groups(broker, "describe", group)
        assert shown.exit_code == 0, shown.output
        assert "type share" in shown.output and "members 1" in shown.output
        [member] = [r for r in (line.split("│") for line in shown.output.splitlines()) if "worker-1" in "".join(r)]
        assert f"{topic} 0" in "".join(member)
        assert table_rows(shown.output, topic) == [[topic, "0", "5", "3"]]
        refused = strom_groups(broker, "reset-offsets", group, "--topic", topic, "--to-offset", "1")
        assert refused.exit_code != 0 and "active" in refused.output
        c.commit_sync(15)
    finally:
        c.close()
    wait_empty(broker.bootstrap, group)
    reset = strom_groups(broker, "reset-offsets", group, "--topic", topic, "--to-offset", "6")
    assert reset.exit_code == 0, reset.output
    assert table_rows(reset.output, topic) == [[topic, "0", "8", "6"]]
    assert table_rows(strom_groups(broker, "describe", group).output, topic) == [[topic, "0", "6", "2"]]
    earliest = strom_groups(broker, "reset-offsets", group, "--topic", topic, "--shift-by", "-3")
    assert earliest.exit_code == 0, earliest.output
    assert table_rows(strom_groups(broker, "describe", group).output, topic) == [[topic, "0", "3", "5"]]
    assert consume_and_accept(broker.bootstrap, group, topic, 5) == [3, 4, 5, 6, 7]
    wait_empty(broker.bootstrap, group)
    deleted = strom_groups(broker, "delete-offsets", group, "--topic", topic)
    assert deleted.exit_code == 0, deleted.output
    assert table_rows(strom_groups(broker, "describe", group).output, topic) == []


def test_the_console_lists_share_groups_with_members_and_share_partitions(broker: BrokerProcess) -> None:
    from test_admin_api import call
    from test_metrics import admin_url

    api = admin_url(broker) + "/api"
    group = fresh("g")
    topic = topic_with(broker.bootstrap, [f"v{i}".encode() for i in range(6)], group)
    assert consume_and_accept(broker.bootstrap, group, topic, 2, **{"max.poll.records": 2}) == [0, 1]
    c = share_consumer(broker.bootstrap, group, topic, **{"client.id": "console-worker"})
    try:
        poll_until(c, lambda got: len(got) >= 4)
        listed = wait_until(lambda: [g for g in call("GET", api + "/groups")[1]["groups"]
                                     if g["group_id"] == group and g["members"] == 1], 20, what="the share group")
        assert (listed[0]["type"], listed[0]["topics"], listed[0]["lag"]) == ("share", [topic], 4)
        status, g = call("GET", api + "/groups/" + group)
        assert status == 200 and g["type"] == "share" and g["state"] == "Stable"
        [m] = g["member_list"]
        assert m["client_id"] == "console-worker" and m["assignment"] == [{"topic": topic, "partitions": [0]}]
        assert [(o["partition"], o["committed"], o["end_offset"], o["lag"]) for o in g["offsets"]] == [(0, 2, 6, 4)]
        c.commit_sync(15)
    finally:
        c.close()
