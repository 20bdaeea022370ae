"""`strom groups` against a live broker: list, describe with lag, reset-offsets, delete."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, TopicPartition
from helpers import confluent_produce
from test_groups_common import FAST_CONSUMER, create_topics, group_broker_fixture, poll_all, values

from strom.cli.groups import groups

TOPIC, GROUP = "cli-topic", "cli-group"


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


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
        assert [c[1:] for c in table_rows(r.output, GROUP)] == [["Stable", "consumer"]], r.output

        r = strom_groups(gbroker, "describe", GROUP)
        assert r.exit_code == 0, r.output
        assert "Stable" in r.output and "members 1" in r.output
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
