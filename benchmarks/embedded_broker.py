#!/usr/bin/env python3
"""How long strom.testing makes a test wait: a broker's start, and the strom_topic fixture.

1. From ``EmbeddedBroker()`` to the first record produced (confluent-kafka, acks=all) and consumed
   through a consumer group (subscribe, join, fetch): each repetition a new broker; the phases
   printed are the broker's start (until it serves), the produce, the group's first record. Twice
   in one run: brokers started as fresh subprocesses (STROM_TESTING_FORK_SERVER=0), then forked
   from the fork server, whose first broker (a cold start: it starts the server) is shown apart
   from the warm ones after it. Then restart() and restart(hard=True), each way.
2. The strom_topic fixture: a temporary pytest project with N tests that take ``strom_topic`` and N
   that take only ``strom_broker`` (the session broker), run in a pytest subprocess; a plugin in the
   project notes each test's setup time. The fixture's cost is the difference of the medians.

    .venv/bin/python benchmarks/embedded_broker.py            # 9 brokers each way, 200 + 200 tests
    .venv/bin/python benchmarks/embedded_broker.py -n 5 -t 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path


def first_record(runs: int, fork_server: bool) -> None:
    from confluent_kafka import Consumer, Producer

    from strom.testing import EmbeddedBroker

    os.environ["STROM_TESTING_FORK_SERVER"] = "1" if fork_server else "0"
    phases: dict[str, list[float]] = {"start": [], "produce": [], "group consume": [], "total": []}
    print(f"brokers {'forked from the fork server' if fork_server else 'started as subprocesses'}:", flush=True)
    for i in range(runs):
        t0 = time.perf_counter()
        broker = EmbeddedBroker().start()
        try:
            t1 = time.perf_counter()
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                                 "log.connection.close": False})
            producer.produce("first", key=b"k", value=b"hello")
            assert producer.flush(30) == 0
            t2 = time.perf_counter()
            del producer  # not left reconnecting to a stopped broker during the next runs
            consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench",
                                 "auto.offset.reset": "earliest", "log.connection.close": False})
            consumer.subscribe(["first"])
            deadline = time.monotonic() + 30
            while True:
                msg = consumer.poll(0.01)
                if msg is not None and msg.error() is None:
                    break
                assert time.monotonic() < deadline, "no record within 30 s"
            t3 = time.perf_counter()
            consumer.close()
        finally:
            broker.stop()
        for name, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
            phases[name].append(value)
        print(f"  run {i + 1}: start {t1 - t0:.3f} s, produce {t2 - t1:.3f} s, group consume {t3 - t2:.3f} s, "
              f"total {t3 - t0:.3f} s", flush=True)
    if fork_server:
        print(f"  the first broker (cold: it starts the fork server): start {phases['start'][0]:.3f} s, "
              f"total {phases['total'][0]:.3f} s")
        phases = {name: values[1:] for name, values in phases.items()}
    kind = "forked, warm" if fork_server else "subprocess"
    print(f"EmbeddedBroker() -> first record through a consumer group ({kind}), {len(phases['total'])} runs "
          f"(median, min-max):")
    for name, values in phases.items():
        print(f"  {name:14} {statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})")


def restarts(times: int, fork_server: bool) -> None:
    from strom.testing import EmbeddedBroker

    os.environ["STROM_TESTING_FORK_SERVER"] = "1" if fork_server else "0"
    with EmbeddedBroker() as broker:
        broker.create_topic("kept", partitions=3)
        broker.produce("kept", [(b"%d" % i, b"v") for i in range(30)])
        took: dict[bool, list[float]] = {False: [], True: []}
        for hard in (False, True):
            for _ in range(times):
                t0 = time.perf_counter()
                broker.restart(hard=hard)
                took[hard].append(time.perf_counter() - t0)
        assert len(broker.records("kept")) == 30
    print(f"restart() / restart(hard=True), {times} each, 3 partitions "
          f"({'forked' if fork_server else 'subprocess'}; median, min-max): "
          + " / ".join(f"{statistics.median(v):.3f} s ({min(v):.3f}-{max(v):.3f})" for v in took.values()))


PLUGIN = '''
import json, os, pytest

durations = {}

@pytest.hookimpl
def pytest_runtest_logreport(report):
    if report.when == "setup":
        durations[report.nodeid.split("::")[-1]] = report.duration

def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump(durations, f)
'''

TESTS = '''
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_broker_only(strom_broker, i):
    assert strom_broker.port

@pytest.mark.parametrize("i", range({n}))
def test_with_topic(strom_topic, i):
    assert strom_topic
'''


def topic_fixture(tests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "conftest.py").write_text(textwrap.dedent(PLUGIN))
        (project / "test_bench.py").write_text(textwrap.dedent(TESTS.replace("{n}", str(tests))))
        (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        out = project / "durations.json"
        env = {**os.environ, "BENCH_OUT": str(out)}
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=project, env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        wall = time.perf_counter() - started
        durations: dict[str, float] = json.loads(out.read_text())
    # The first broker-only test starts the session broker: left out.
    only = [d for name, d in durations.items() if name.startswith("test_broker_only") and name != "test_broker_only[0]"]
    topic = [d for name, d in durations.items() if name.startswith("test_with_topic")]
    print(f"strom_topic fixture, {len(topic)} tests (setup time per test, median, p90, max):")
    for label, values in (("strom_broker only", only), ("strom_topic", topic)):
        values.sort()
        print(f"  {label:18} {statistics.median(values) * 1000:6.2f} ms, p90 {values[int(len(values) * 0.9)] * 1000:.2f}"
              f" ms, max {values[-1] * 1000:.2f} ms")
    print(f"  the fixture's cost: {(statistics.median(topic) - statistics.median(only)) * 1000:.2f} ms per test "
          f"(pytest run of {len(durations)} tests: {wall:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=9, help="brokers to start in each way (default 9)")
    parser.add_argument("-t", "--tests", type=int, default=200, help="tests of each kind (default 200)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    first_record(args.runs, fork_server=False)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    first_record(args.runs + 1, fork_server=True)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    restarts(5, fork_server=False)
    restarts(5, fork_server=True)
    topic_fixture(args.tests)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
