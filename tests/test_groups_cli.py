"""`strom groups` against a live broker: list, describe with lag, reset-offsets, delete; the type of a
group, and a consumer-protocol group's epochs and current versus target assignments."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, TopicPartition
from helpers import RawConnection, confluent_produce, ms, wait_until
from test_groups_common import FAST_CONSUMER, create_topics, poll_all, start_group_broker, values
from test_groups_consumer_protocol import CG_BROKER_OVERRIDES, CG_CONSUMER, _heartbeat

from strom.cli.groups import groups

TOPIC, GROUP = "cli-topic", "cli-group"


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Classic groups as in the other group tests; consumer-protocol members heartbeat every 300 ms, and
    # a member driven by hand here has 10 s between its heartbeats.
    b = start_group_broker(tmp_path_factory.mktemp("groups") / "data",
                           **{**CG_BROKER_OVERRIDES, "group.consumer.session.timeout.ms": "10000"})
    try:
        yield b
    finally:
        b.stop()


def strom_groups(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "250"}).invoke(groups, ["--bootstrap-server", broker.bootstrap, *args])


def table_rows(output: str, first_cell: str) -> list[list[str]]:
    """Cells of the table rows whose first cell is ``first_cell``."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        cells = [c for c in cells if c]
        if cells and cells[0] == first_cell:
            rows.append(cells)
    return rows


def committed(broker: BrokerProcess) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


@pytest.mark.timeout(120)
def test_groups_commands(gbroker: BrokerProcess) -> None:
    create_topics(gbroker.bootstrap, {TOPIC: 3})
    delivered = confluent_produce(gbroker.bootstrap, TOPIC, values(90))
    log_end = {p: sum(1 for d in delivered if d.partition == p) for p in range(3)}

    consumer = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": GROUP, "client.id": "cli-test-client",
                         **FAST_CONSUMER})
    consumer.subscribe([TOPIC])
    seen: list[Any] = []
    try:
        poll_all([consumer], lambda: len(seen) >= 60, 30, lambda i, m: seen.append(m), "60 records")
        consumed: dict[int, int] = {}
        for m in seen:
            consumed[m.partition()] = max(consumed.get(m.partition(), 0), m.offset() + 1)
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in consumed.items()], asynchronous=False)

        r = strom_groups(gbroker, "list")
        assert r.exit_code == 0, r.output
        assert [c[1:] for c in table_rows(r.output, GROUP)] == [["Stable", "classic"]], r.output

        r = strom_groups(gbroker, "describe", GROUP)
        assert r.exit_code == 0, r.output
        assert "type classic  state Stable" in r.output and "members 1" in r.output
        assert "epoch" not in r.output  # a classic group has generations, not epochs
        rows = {int(c[1]): c for c in table_rows(r.output, TOPIC)}
        assert set(rows) == {0, 1, 2}
        total_lag = 0
        for p, cells in rows.items():
            current, end, lag = cells[2], int(cells[3]), cells[4]
            assert end == log_end[p]
            if p in consumed:
                assert int(current) == consumed[p] and int(lag) == log_end[p] - consumed[p]
                total_lag += int(lag)
            else:
                assert (current, lag) == ("-", "-")
                total_lag += end
            assert cells[-1] == "cli-test-client"
        assert total_lag == 90 - 60

        r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest")
        assert r.exit_code != 0 and "active" in r.output
        assert len(r.output.strip().splitlines()) == 1
        r = strom_groups(gbroker, "delete", GROUP)
        assert r.exit_code != 0 and len(r.output.strip().splitlines()) == 1
    finally:
        consumer.close()

    before = committed(gbroker)
    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--dry-run")
    assert r.exit_code == 0, r.output
    assert [c[3] for c in table_rows(r.output, TOPIC)] == ["0", "0", "0"]
    assert committed(gbroker) == before

    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "5")
    assert r.exit_code == 0, r.output
    assert committed(gbroker) == {p: min(5, log_end[p]) for p in range(3)}

    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", f"{TOPIC}:1", "--shift-by", "-2")
    assert r.exit_code == 0, r.output
    assert committed(gbroker)[1] == min(5, log_end[1]) - 2

    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-latest")
    assert r.exit_code == 0, r.output
    assert committed(gbroker) == log_end

    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-datetime", "2000-01-01T00:00:00")
    assert r.exit_code == 0, r.output
    assert committed(gbroker) == {0: 0, 1: 0, 2: 0}
    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-datetime", "2999-01-01T00:00:00Z")
    assert committed(gbroker) == log_end

    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", TOPIC)
    assert r.exit_code != 0 and "exactly one" in r.output
    r = strom_groups(gbroker, "reset-offsets", GROUP, "--topic", "no-such-topic", "--to-latest")
    assert r.exit_code != 0 and "does not exist" in r.output

    r = strom_groups(gbroker, "describe", GROUP)
    assert r.exit_code == 0 and "Empty" in r.output
    assert all(c[4] == "0" for c in table_rows(r.output, TOPIC))  # lag 0 after --to-latest

    r = strom_groups(gbroker, "delete", GROUP)
    assert r.exit_code == 0, r.output
    r = strom_groups(gbroker, "describe", GROUP)
    assert r.exit_code != 0 and "does not exist" in r.output
    r = strom_groups(gbroker, "list")
    assert table_rows(r.output, GROUP) == []


def _members(output: str) -> dict[str, list[str]]:
    """The member table of a consumer group's describe, by client id: member id, instance id, client
    id, host, epoch, subscription, assignment."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")]
        cells = [c for c in cells if c]
        if len(cells) == 7 and cells[0] != "MEMBER-ID":
            rows[cells[2]] = cells
    return rows


def _epochs(output: str) -> tuple[int, int]:
    m = re.search(r"group epoch (\d+)  target assignment epoch (\d+)", output)
    assert m is not None, output
    return int(m[1]), int(m[2])


@pytest.mark.timeout(120)
def test_describe_consumer_group_epochs_and_assignments(gbroker: BrokerProcess) -> None:
    """A member driven by hand (so it revokes exactly when the test says) and a confluent-kafka
    member (group.protocol=consumer, regex subscription): describe shows the type, the epochs, and each
    member's partitions to revoke (-N) and to be assigned (+N) until the rebalance is done."""
    from confluent_kafka import Consumer

    bs, topic, group = gbroker.bootstrap, "cli-cg-topic", "cli-cg-group"
    create_topics(bs, {topic: 6})
    member_id = str(uuid.uuid4())
    with RawConnection(bs, client_id="raw-member") as conn:
        topic_id = conn.topic_id(topic)
        joined = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=0, instance_id="raw-instance",
                            rebalance_timeout=ms(30000), subscribed_topic_names=(topic,), owned={})
        e1 = int(joined.member_epoch)
        assert sorted(joined.assignment.topic_partitions[0].partitions) == list(range(6))
        _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=e1, owned={topic_id: list(range(6))})

        r = strom_groups(gbroker, "describe", group)
        assert r.exit_code == 0, r.output
        assert "type consumer  state Stable  assignor uniform  members 1" in r.output, r.output
        assert _epochs(r.output) == (e1, e1)
        assert _members(r.output)["raw-member"] == [member_id, "raw-instance", "raw-member", "/127.0.0.1", str(e1),
                                                    topic, f"{topic} 0,1,2,3,4,5"]
        assert {c[1] for c in table_rows(r.output, topic)} == {str(p) for p in range(6)}
        r = strom_groups(gbroker, "list")
        assert [c[1:] for c in table_rows(r.output, group)] == [["Stable", "consumer"]], r.output

        # A second member: the target moves half the partitions to it; the first still owns them.
        joiner = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": "cg-joiner", **CG_CONSUMER})
        joiner.subscribe(["^cli-cg-.*"])
        try:
            def pending() -> Any:
                joiner.poll(0.1)
                out = strom_groups(gbroker, "describe", group).output
                m = _members(out)
                return out if "cg-joiner" in m and "+" in m["cg-joiner"][6] else None

            out = wait_until(pending, 30, interval=0, what="the joiner's target assignment")
            e2, target_epoch = _epochs(out)
            assert e2 > e1 and target_epoch == e2
            assert "type consumer  state Reconciling" in out, out
            raw, new = _members(out)["raw-member"], _members(out)["cg-joiner"]
            assert raw[4] == str(e1) and new[4] == str(e2)
            assert new[5] == "regex (^cli-cg-.*)"  # librdkafka sends its regexes so
            revoking = {int(p) for p in re.findall(r"-(\d+)", raw[6])}
            assigning = {int(p) for p in re.findall(r"\+(\d+)", new[6])}
            assert len(revoking) == 3 and revoking == assigning, out
            assert new[6].replace("+", "") == f"{topic} " + ",".join(str(p) for p in sorted(assigning))

            # The first member learns its new assignment: what it keeps is its assignment now (the rest is
            # pending revocation, not shown, as in Kafka); the joiner waits for the revocation.
            kept = sorted(set(range(6)) - revoking)
            told = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=e1,
                              owned={topic_id: list(range(6))})
            assert told.assignment is not None
            assert sorted(told.assignment.topic_partitions[0].partitions) == kept
            r = strom_groups(gbroker, "describe", group)
            assert _members(r.output)["raw-member"][6] == f"{topic} " + ",".join(map(str, kept)), r.output
            assert "+" in _members(r.output)["cg-joiner"][6]

            # It revokes; the joiner gets the partitions at its next heartbeat; the group is stable.
            done = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=e1, owned={topic_id: kept})
            assert int(done.member_epoch) == e2

            def settled() -> Any:
                joiner.poll(0.1)
                out = strom_groups(gbroker, "describe", group).output
                return out if "state Stable" in out else None

            out = wait_until(settled, 30, interval=0, what="a stable group")
            members = _members(out)
            assert not any(re.search(r"[-+]\d", m[6]) for m in members.values()), out
            assert members["cg-joiner"][4] == str(e2) and members["raw-member"][4] == str(e2)
            assert members["cg-joiner"][6] == f"{topic} " + ",".join(str(p) for p in sorted(assigning))
            owners = {int(c[1]): c[-1] for c in table_rows(out, topic)}
            assert owners == {p: "cg-joiner" if p in assigning else "raw-member" for p in range(6)}
        finally:
            joiner.close()


def join_by_hand(conn: RawConnection, group: str, member_id: str, topic: str, partitions: int) -> int:
    """Join ``group`` as a consumer-protocol member driven by hand, take every partition of ``topic`` and
    acknowledge them; its member epoch. It heartbeats no more unless the caller does."""
    topic_id = conn.topic_id(topic)
    joined = _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout=ms(30000),
                        subscribed_topic_names=(topic,), owned={})
    epoch = int(joined.member_epoch)
    assert sorted(joined.assignment.topic_partitions[0].partitions) == list(range(partitions)), joined
    _heartbeat(conn, group_id=group, member_id=member_id, member_epoch=epoch, owned={topic_id: list(range(partitions))})
    return epoch
