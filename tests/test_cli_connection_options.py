"""Every `strom` command that talks to a broker takes the connection options where Kafka users type them:
after the subcommand (``strom groups describe G --bootstrap-server H:P``), before it (``strom groups
--bootstrap-server H:P describe G``; for produce and consume, before the command), or from
$STROM_BOOTSTRAP_SERVER. The broker runs on a free port, never 9092, so a command that ignored the option
would fail (or reach another broker, which the checks on each command's effect would notice).

The commands run in-process through click's CliRunner on the real ``strom`` command (the same parser a
shell reaches); one test runs the installed entry point as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerproc import BrokerProcess, free_port
from click.testing import CliRunner, Result
from helpers import confluent_admin, create_topics, wait_until

from strom.cli.main import cli

pytestmark = pytest.mark.timeout(90)

ENV = "STROM_BOOTSTRAP_SERVER"
PLACES = ("after", "before", "env")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("connopts") / "data").start()
    assert b.port != 9092
    try:
        yield b
    finally:
        b.stop()


def strom(args: list[str], env_bootstrap: str | None = None, stdin: str | None = None) -> Result:
    # None removes the variable: only what the test sets may reach the command.
    env = {ENV: env_bootstrap, "STROM_DEBUG": None, "COLUMNS": "250"}
    return CliRunner(env=env).invoke(cli, args, input=stdin, catch_exceptions=False)


def ok(args: list[str], env_bootstrap: str | None = None, stdin: str | None = None) -> str:
    r = strom(args, env_bootstrap, stdin)
    assert r.exit_code == 0, f"strom {' '.join(args)} (env {env_bootstrap}) -> {r.exit_code}:\n{r.output}"
    return r.output


def placed(place: str, bs: str, path: list[str], *args: str) -> tuple[list[str], str | None]:
    """The command line for ``strom <path> <args>`` with the broker given in one of the PLACES."""
    option = ["--bootstrap-server", bs]
    if place == "after":
        return [*path, *args, *option], None
    if place == "before":  # just before the (sub)command: `strom groups -b X describe`, `strom -b X produce`
        return [*path[:-1], *option, path[-1], *args], None
    assert place == "env"
    return [*path, *args], bs


def run(place: str, bs: str, path: list[str], *args: str, stdin: str | None = None) -> str:
    argv, env = placed(place, bs, path, *args)
    return ok(argv, env, stdin)


def partitions_of(bs: str, topic: str) -> int:
    md = confluent_admin(bs).list_topics(timeout=10)  # all topics: asking for one by name may create it
    t = md.topics.get(topic)
    return 0 if t is None or t.error is not None else len(t.partitions)


def topic_config(bs: str, topic: str, name: str) -> str:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)  # held until the answer: a collected client cancels its requests
    (f,) = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=15).values()
    return str(f.result(timeout=20)[name].value)


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    admin = confluent_admin(bs)
    (f,) = admin.list_consumer_group_offsets([request], request_timeout=15).values()
    return {tp.partition: tp.offset for tp in f.result(timeout=20).topic_partitions if tp.offset >= 0}


def group_rows(output: str, topic: str) -> list[list[str]]:
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│") if c.strip()]
        if cells and cells[0] == topic:
            rows.append(cells)
    return rows


@pytest.mark.timeout(120)
@pytest.mark.parametrize("place", PLACES)
def test_every_client_command(broker: BrokerProcess, place: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bs = broker.bootstrap
    topic, group, bench_topic = f"opts-{place}", f"opts-group-{place}", f"opts-bench-{place}"

    # topics
    assert f"Created topic '{topic}'" in run(place, bs, ["topics", "create"], topic, "-p", "1")
    assert partitions_of(bs, topic) == 1
    assert topic in run(place, bs, ["topics", "list"], "-q").split()
    (described,) = json.loads(run(place, bs, ["topics", "describe"], topic, "--json"))
    assert described["name"] == topic and len(described["partitions"]) == 1
    run(place, bs, ["topics", "alter"], topic, "--partitions", "2")
    assert partitions_of(bs, topic) == 2

    # cluster
    shown_cluster = json.loads(run(place, bs, ["cluster"], "--json"))
    assert [(b["port"], b["controller"]) for b in shown_cluster["brokers"]] == [(broker.port, True)]

    # configs
    run(place, bs, ["configs", "alter"], "--topic", topic, "--set", "retention.ms=3600000")
    assert topic_config(bs, topic, "retention.ms") == "3600000"
    shown = json.loads(run(place, bs, ["configs", "describe"], "--topic", topic, "--json"))
    assert shown["retention.ms"]["value"] == "3600000"

    # produce, then consume as a group (which commits the group's offsets)
    records = [f"k{i}:v{i}" for i in range(6)]
    run(place, bs, ["produce"], topic, "-K", ":", "-q", stdin="\n".join(records) + "\n")
    out = run(place, bs, ["consume"], topic, "-g", group, "--from-beginning", "-e", "-q", "-f", "{key}:{value}")
    assert sorted(out.splitlines()) == records
    wait_until(lambda: sum(committed(bs, group, topic, 2).values()) == 6, 15, what="offsets committed")

    # groups
    assert group in run(place, bs, ["groups", "list"])
    rows = group_rows(run(place, bs, ["groups", "describe"], group), topic)
    assert sum(int(r[2]) for r in rows) == 6  # CURRENT-OFFSET per partition
    run(place, bs, ["groups", "reset-offsets"], group, "--topic", topic, "--to-earliest")
    assert committed(bs, group, topic, 2) == {0: 0, 1: 0}
    assert f"deleted group {group}" in run(place, bs, ["groups", "delete"], group)

    # bench
    result = json.loads(run(place, bs, ["bench", "produce"], "--topic", bench_topic, "--records", "20",
                            "--record-size", "16", "--json"))
    assert result["bootstrap_server"] == bs and result["records"]["acknowledged"] == 20, result
    result = json.loads(run(place, bs, ["bench", "consume"], "--topic", bench_topic, "--records", "20", "--json"))
    assert result["records"]["received"] == 20, result
    result = json.loads(run(place, bs, ["bench", "e2e"], "--topic", bench_topic, "--records", "20",
                            "--target-rate", "200", "--json"))
    assert result["records"]["received"] == 20, result

    # demo: everything up to starting Spark, which is replaced by a stub that records where it was sent
    from strom.demo.trucking import ALERTS_TOPIC, EVENTS_TOPIC
    from strom.demo.trucking import run as demo_run

    reached: list[str] = []
    monkeypatch.setattr(demo_run, "_run", lambda client, *a: reached.append(client.bootstrap) or 0)
    monkeypatch.setattr(demo_run, "registry_reachable", lambda url, config: True)  # the registry is _run's
    r = strom(*placed(place, bs, ["demo", "trucking"], "--data-dir", str(broker.data_dir.parent / f"demo-{place}")))
    assert r.exit_code == 0, r.output
    assert reached == [bs] and f"using the broker at {bs}" in r.output
    assert partitions_of(bs, EVENTS_TOPIC) == 3 and partitions_of(bs, ALERTS_TOPIC) == 1

    # and delete
    run(place, bs, ["topics", "delete"], topic, bench_topic)
    wait_until(lambda: partitions_of(bs, topic) == 0 and partitions_of(bs, bench_topic) == 0, 15,
               what="topics deleted")


def test_nearest_option_wins(broker: BrokerProcess) -> None:
    """Precedence: the option nearest the command, then the outer ones, then the environment, then the
    default. A dead address anywhere that should lose proves it lost; one that should win, that it won."""
    live, dead, dead2 = broker.bootstrap, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    create_topics(live, {"opts-precedence": 1})

    def names(args: list[str], env: str | None) -> list[str]:
        return ok(args, env).split()

    assert "opts-precedence" in names(["topics", "list", "-q", "-b", live], dead)      # option over env
    assert "opts-precedence" in names(["topics", "-b", live, "list", "-q"], dead)      # group option over env
    assert "opts-precedence" in names(["-b", live, "topics", "list", "-q"], dead)      # top-level option over env
    assert "opts-precedence" in names(["topics", "list", "-q"], live)                  # env over the default
    assert "opts-precedence" in names(["-b", dead, "topics", "-b", dead2, "list", "-q", "-b", live], None)
    for args in (["-b", live, "topics", "-b", dead, "list"], ["-b", dead, "topics", "list"]):
        r = strom(args, live)
        assert r.exit_code == 1 and f"cannot reach broker at {dead}" in r.output, (args, r.output)

    # -X properties add up across the levels, and the nearest wins key by key.
    assert "opts-precedence" in names(["-X", "security.protocol=bogus", "topics", "list", "-q",
                                       "-X", "security.protocol=plaintext", "-b", live], None)
    r = strom(["-X", "no.such.property=1", "groups", "list", "-b", live])
    assert r.exit_code == 1 and "no.such.property" in r.output, r.output
    r = strom(["groups", "list", "-b", live, "--connect-timeout", "0.1"])
    assert r.exit_code == 2 and "--connect-timeout" in r.output, r.output


def _entry_point_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "STROM_DEBUG")}
    return {**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "250", **extra}


def test_entry_point_groups_describe_with_bootstrap_after_the_group(broker: BrokerProcess) -> None:
    """The issue's own example, as typed in a shell: `strom groups describe my-group --bootstrap-server H:P`."""
    from confluent_kafka import Consumer, TopicPartition

    bs = broker.bootstrap
    create_topics(bs, {"opts-entry": 1})
    c = Consumer({"bootstrap.servers": bs, "group.id": "my-group", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("opts-entry", 0, 0)], asynchronous=False)
    finally:
        c.close()
    strom_bin = str(Path(sys.executable).parent / "strom")
    for argv, env in (([strom_bin, "groups", "describe", "my-group", "--bootstrap-server", bs], {}),
                      ([strom_bin, "groups", "--bootstrap-server", bs, "describe", "my-group"], {}),
                      ([strom_bin, "groups", "describe", "my-group"], {ENV: bs})):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_entry_point_env(**env))
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        assert "Group my-group" in proc.stdout and "opts-entry" in proc.stdout, proc.stdout


def test_connection_options_are_refused_before_broker(tmp_path: Path) -> None:
    """`strom -b H:P broker` would look like it sets the broker's address; it is refused, and nothing starts."""
    argv = [sys.executable, "-m", "strom.cli.main", "-b", "127.0.0.1:19092", "broker",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", "admin.listeners="]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=_entry_point_env())
    assert proc.returncode == 2, proc.stderr
    assert "listeners" in proc.stderr and not (tmp_path / "data").exists()
