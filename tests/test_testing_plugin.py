"""The pytest plugin, seen from a user's project: a small temporary project runs in a pytest
subprocess, with the fixtures and confluent-kafka, kafka-python and aiokafka, once plainly and once
with pytest-xdist (-n 2). Afterwards no broker process is left and no data directory remains.
A project that uses none of the fixtures starts no broker; ``-p no:strom`` turns the plugin off."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

SRC = Path(__file__).resolve().parent.parent / "src" / "strom"

CONFTEST = '''
import os

import pytest


@pytest.fixture
def record():
    """Note a broker's pid and data directory, for the outer test to check they are gone."""
    def note(kind, broker):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.environ["STROM_RECORD"], "a") as f:
            f.write(f"{kind} {worker} {broker.pid} {broker.data_dir}\\n")
    return note
'''

TEST_CONFLUENT = '''
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource


def test_group_round_trip(strom_broker, strom_topic, record):
    record("session", strom_broker)
    p = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, "acks": "all"})
    for i in range(10):
        p.produce(strom_topic, key=b"k", value=b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": "g-confluent",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([strom_topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert got == [b"v%d" % i for i in range(10)]
    assert strom_broker.committed("g-confluent", strom_topic) == {0: 10}


@pytest.mark.strom_topic(partitions=3, config={"cleanup.policy": "compact"})
def test_marker_shapes_the_topic(strom_broker, strom_topic):
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    assert len(admin.list_topics(strom_topic, timeout=10).topics[strom_topic].partitions) == 3
    resource = ConfigResource("topic", strom_topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    strom_broker.produce(strom_topic, [(b"a", b"1"), (b"b", b"2")])
    assert sorted(r.value for r in strom_broker.records(strom_topic)) == [b"1", b"2"]


def test_each_test_gets_a_new_topic(strom_broker, strom_topic):
    assert strom_topic.startswith("test_each_test_gets_a_new_topic")
    assert strom_broker.records(strom_topic) == []
'''

TEST_KAFKA_PYTHON = '''
from kafka import KafkaConsumer, KafkaProducer


def test_kafka_python_group(strom_broker, strom_topic, record):
    record("session", strom_broker)
    p = KafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers, acks="all")
    for i in range(10):
        p.send(strom_topic, key=b"k", value=b"v%d" % i).get(timeout=30)
    p.close()
    c = KafkaConsumer(strom_topic, bootstrap_servers=strom_broker.bootstrap_servers, group_id="g-kafka-python",
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=30000)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 10:
            break
    c.commit()
    c.close()
    assert got == [b"v%d" % i for i in range(10)]
    assert strom_broker.committed("g-kafka-python", strom_topic) == {0: 10}
'''

TEST_AIOKAFKA = '''
import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


def test_aiokafka_group(strom_broker, strom_topic, record):
    record("session", strom_broker)

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers, acks="all")
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(strom_topic, key=b"k", value=b"v%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(strom_topic, bootstrap_servers=strom_broker.bootstrap_servers, group_id="g-aiokafka",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = []
            while len(got) < 10:
                m = await asyncio.wait_for(c.getone(), 30)
                got.append(m.value)
            await c.commit()
        finally:
            await c.stop()
        return got

    assert asyncio.run(main()) == [b"v%d" % i for i in range(10)]
    assert strom_broker.committed("g-aiokafka", strom_topic) == {0: 10}
'''

TEST_FACTORY = '''
def test_factory_brokers(strom_broker_factory, record):
    first = strom_broker_factory({"num.partitions": "2"})
    second = strom_broker_factory()
    record("factory", first)
    record("factory", second)
    assert first.port != second.port and first.data_dir != second.data_dir
    first.produce("auto-created", [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")])
    assert {r.partition for r in first.records("auto-created")} == {0, 1}  # num.partitions=2
'''

TEST_FAILURE = '''
def test_fails_on_purpose(strom_broker, strom_topic):
    strom_broker.produce(strom_topic, [b"x"])
    raise AssertionError("failing on purpose to see the broker log")
'''

INI = """
[pytest]
addopts = -p no:cacheprovider --strict-markers
timeout = 90
"""


def run_pytest(project: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STROM_"))}
    env["STROM_RECORD"] = str(project / "record.txt")
    return subprocess.run([sys.executable, "-m", "pytest", "-rA", "--junitxml", str(project / "report.xml"), *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def outcomes(project: Path) -> dict[str, int]:
    suite = ET.parse(project / "report.xml").getroot().find("testsuite")
    assert suite is not None
    return {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}


def write(project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (project / name).write_text(textwrap.dedent(text).lstrip())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # Still in the process table: only acceptable as a zombie waiting for its parent.
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_fixtures_with_three_clients(tmp_path: Path, xdist: list[str]) -> None:
    write(tmp_path, {"pytest.ini": INI, "conftest.py": CONFTEST, "test_confluent.py": TEST_CONFLUENT,
                     "test_kafka_python.py": TEST_KAFKA_PYTHON, "test_aiokafka.py": TEST_AIOKAFKA,
                     "test_factory.py": TEST_FACTORY, "test_failure.py": TEST_FAILURE})
    result = run_pytest(tmp_path, *xdist)
    output = result.stdout + result.stderr
    assert outcomes(tmp_path) == {"tests": 7, "failures": 1, "errors": 0, "skipped": 0}, output
    assert result.returncode == 1  # the one failing on purpose
    # The failing test's report carries the log its broker wrote during it.
    section = re.search(r"-+ strom broker 127\.0\.0\.1:\d+ log \(call\) -+\n(.*?)(?:\n-{3,}|\n={3,})", output, re.S)
    assert section is not None, output
    assert re.search(r"created topic test_fails_on_purpose\S*-\d+ with 1 partitions", section.group(1)), section.group(1)

    records = [line.split() for line in (tmp_path / "record.txt").read_text().splitlines()]
    assert len(records) == 5
    sessions = {(worker, int(pid)) for kind, worker, pid, _ in records if kind == "session"}
    workers = {worker for worker, _ in sessions}
    assert len(sessions) == len(workers)  # one session broker per worker
    assert workers == ({"main"} if not xdist else workers & {"gw0", "gw1"})
    for _, _, pid, data_dir in records:
        assert gone(int(pid)), f"broker {pid} still running"
        assert not Path(data_dir).exists(), f"{data_dir} left behind"


NO_FIXTURES = '''
import os
import sys

import pytest


@pytest.mark.strom_topic(partitions=2)  # a registered marker: --strict-markers accepts it
def test_plugin_loaded_but_idle(request):
    assert request.config.pluginmanager.has_plugin("strom")
    heavy = [m for m in ("strom.testing.embedded", "strom.broker", "kio", "confluent_kafka") if m in sys.modules]
    assert heavy == []
    children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    assert children == []
'''

PLUGIN_OFF = '''
import pytest


def test_plugin_is_off(request):
    assert not request.config.pluginmanager.has_plugin("strom")


def test_fixture_is_unknown(strom_broker):
    pass
'''


def test_a_suite_without_the_fixtures_starts_no_broker(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": INI, "test_plain.py": NO_FIXTURES})
    result = run_pytest(tmp_path)
    assert outcomes(tmp_path) == {"tests": 1, "failures": 0, "errors": 0, "skipped": 0}, result.stdout
    assert not (tmp_path / "record.txt").exists()


def test_no_strom_turns_the_plugin_off(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": INI, "test_off.py": PLUGIN_OFF})
    result = run_pytest(tmp_path, "-p", "no:strom")
    assert outcomes(tmp_path) == {"tests": 2, "failures": 0, "errors": 1, "skipped": 0}, result.stdout
    assert "fixture 'strom_broker' not found" in result.stdout
    # Without the plugin its marker is unknown, and --strict-markers says so.
    write(tmp_path, {"test_plain.py": NO_FIXTURES})
    result = run_pytest(tmp_path, "-p", "no:strom", "test_plain.py")
    assert result.returncode != 0
    assert "'strom_topic' not found in `markers` configuration option" in result.stdout + result.stderr


def test_strom_testing_is_the_top_layer() -> None:
    # Nothing in strom imports strom.testing (it is for tests), and strom.testing imports none of
    # the broker's layers: the broker runs in the child it starts.
    offenders = []
    for path in SRC.rglob("*.py"):
        inside = path.is_relative_to(SRC / "testing")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            for name in names:
                if not inside and name.startswith("strom.testing"):
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
                if inside and name.startswith("strom.") and not name.startswith(("strom.testing", "strom.cli")):
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert offenders == []
