"""The fork server EmbeddedBroker starts its brokers from (strom.testing._forkserver): brokers are
forked from one warm server process that is a child of the test process; each gets the environment
and working directory of the moment it starts (a variable the interpreter reads at its start sends
the broker to a subprocess instead); a test process with running Kafka client threads is not
disturbed; a broker does not outlive a SIGKILLed test process, not even a paused one; the server
goes at exit, and when it fails brokers start as subprocesses.

The control channel's variable (STROM_TESTING_CONTROL) is itself part of the environment a forked
broker gets only in its request (the server never had it): every fault test passing with the fork
server shows it arrives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from strom.testing import EmbeddedBroker, _forkserver
from strom.testing._forkserver import DISABLE_ENV, ForkedProcess

pytestmark = pytest.mark.timeout(120)


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """Running (or stopped), not gone and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def own_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fork server of this test's own (the process's one is put aside and back afterwards)."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    monkeypatch.setattr(_forkserver, "_server", None)
    monkeypatch.setattr(_forkserver, "_server_error", None)
    try:
        yield
    finally:
        server = _forkserver._server
        if server is not None:
            server.close()


def test_brokers_are_forked_from_one_server(own_server: None) -> None:
    with EmbeddedBroker() as first, EmbeddedBroker({"num.partitions": "2"}) as second:
        assert isinstance(first._proc, ForkedProcess) and isinstance(second._proc, ForkedProcess)
        assert first.pid is not None and second.pid is not None
        server = _forkserver._server
        assert server is not None
        assert ppid(first.pid) == ppid(second.pid) == server.proc.pid
        assert ppid(server.proc.pid) == os.getpid()
        assert "strom.testing._forkserver" in Path(f"/proc/{server.proc.pid}/cmdline").read_text()
        # Each in a session of its own, as a subprocess started by EmbeddedBroker is.
        assert os.getsid(first.pid) == first.pid and os.getsid(second.pid) == second.pid
        second.produce("auto", [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")])
        assert {r.partition for r in second.records("auto")} == {0, 1}
        assert "Threads:\t1\n" in Path(f"/proc/{server.proc.pid}/status").read_text()  # it forks itself only
    assert not alive(first.pid) and not alive(second.pid)
    assert alive(server.proc.pid)  # kept for the next broker


def test_the_environment_and_directory_of_the_moment_reach_the_child(
        own_server: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedBroker() as broker:  # starts the server, with the environment of then
        broker.create_topic("only-here")
        server = _forkserver._server
        assert server is not None
        # A variable set afterwards: a strom CLI command forked from the server reads it.
        monkeypatch.setenv("STROM_BOOTSTRAP_SERVER", broker.bootstrap_servers)
        child = server.spawn(["topics", "list", "--json"], dict(os.environ))
        assert child.stdout is not None
        output = child.stdout.read()
        assert child.wait(30) == 0, output
        assert [t["name"] for t in json.loads(output)] == ["only-here"]
        child.stdout.close()
    # The working directory of the moment: a relative --config is found there.
    (tmp_path / "server.properties").write_text("num.partitions=zero\n")
    monkeypatch.chdir(tmp_path)
    child = server.spawn(["broker", "--config", "server.properties"], dict(os.environ))
    assert child.stdout is not None
    output = child.stdout.read()
    assert child.wait(30) == 2
    assert output.decode().strip().splitlines()[-1].startswith("strom: invalid config num.partitions"), output
    child.stdout.close()


def test_the_directory_the_server_started_in_may_go(own_server: None, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    with EmbeddedBroker() as first:  # starts the server here
        assert isinstance(first._proc, ForkedProcess)
    monkeypatch.chdir(tmp_path)
    gone.rmdir()
    with EmbeddedBroker() as second:
        assert isinstance(second._proc, ForkedProcess) and second.pid is not None
        assert Path(f"/proc/{second.pid}/cwd").resolve() == tmp_path.resolve()
        assert second.produce("t", [b"x"]) == [(0, 0)]


def test_a_variable_read_at_the_interpreters_start_means_a_subprocess(
        own_server: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedBroker() as warm:
        assert isinstance(warm._proc, ForkedProcess)
        monkeypatch.setenv("MY_APP_SETTING", "changed")  # applied in the child: still forked
        with EmbeddedBroker() as forked:
            assert isinstance(forked._proc, ForkedProcess)
        monkeypatch.setenv("PYTHONHASHSEED", "1234")  # the interpreter's: too late for a fork
        with EmbeddedBroker() as fresh:
            assert isinstance(fresh._proc, subprocess.Popen)
            assert fresh.pid is not None
            environ = Path(f"/proc/{fresh.pid}/environ").read_bytes().split(b"\0")
            assert b"PYTHONHASHSEED=1234" in environ and b"MY_APP_SETTING=changed" in environ
            fresh.produce("t", [b"x"])
        monkeypatch.delenv("PYTHONHASHSEED")
        with EmbeddedBroker() as again:
            assert isinstance(again._proc, ForkedProcess)


def test_running_kafka_clients_in_the_test_process_do_not_matter(own_server: None) -> None:
    # librdkafka threads (and a Python thread polling) in this process while brokers are forked:
    # the server forks itself, so nothing here is forked.
    with EmbeddedBroker() as source:
        source.create_topic("busy")
        stop = threading.Event()
        producer = Producer({"bootstrap.servers": source.bootstrap_servers, "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": "busy",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["busy"])

        def churn() -> None:
            while not stop.is_set():
                producer.produce("busy", b"x")
                producer.poll(0)
                consumer.poll(0.01)

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            assert threading.active_count() > 1
            for _ in range(3):
                with EmbeddedBroker() as broker:
                    assert isinstance(broker._proc, ForkedProcess)
                    assert broker.produce("t", [b"1"]) == [(0, 0)]
        finally:
            stop.set()
            thread.join()
            consumer.close()
            producer.flush(10)


TEST_PROCESS = textwrap.dedent('''
    import json, sys, time
    from strom.testing import EmbeddedBroker, _forkserver
    running = EmbeddedBroker().start()
    paused = EmbeddedBroker().start()
    paused.pause()
    print(json.dumps({"brokers": [running.pid, paused.pid], "server": _forkserver._server.proc.pid,
                      "dirs": [str(running.data_dir), str(paused.data_dir)]}), flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(300)
    # else: exit without stopping them
''')


def run_test_process(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], dict[str, list[int]]]:
    script = tmp_path / "test_process.py"
    script.write_text(TEST_PROCESS)
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def test_no_broker_outlives_a_sigkilled_test_process(tmp_path: Path) -> None:
    proc, started = run_test_process(tmp_path, "sleep")
    try:
        pids = [*started["brokers"], started["server"]]
        assert all(alive(p) for p in pids)
        proc.kill()
        proc.wait()
        # The running broker stops (its control channel closed), the server follows after at most
        # a few seconds' grace, and the paused broker dies with it (PR_SET_PDEATHSIG).
        assert wait_gone(pids, 15) == []
    finally:
        for pid in [*started["brokers"], started["server"]]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_brokers_left_running_and_the_server_go_at_exit(tmp_path: Path) -> None:
    began = time.monotonic()
    proc, started = run_test_process(tmp_path, "exit")
    assert proc.wait(30) == 0
    assert time.monotonic() - began < 15
    assert wait_gone([*started["brokers"], started["server"]], 2) == []
    assert not any(Path(d).exists() for d in started["dirs"])


def test_a_failed_server_means_subprocesses(own_server: None, caplog: pytest.LogCaptureFixture) -> None:
    with EmbeddedBroker() as forked:
        server = _forkserver._server
        assert server is not None and isinstance(forked._proc, ForkedProcess) and forked.pid is not None
        server.proc.kill()
        server.proc.wait()
        assert wait_gone([forked.pid], 10) == []  # its brokers go with it (PR_SET_PDEATHSIG)
        with caplog.at_level("WARNING", logger="strom.testing"):
            broker = EmbeddedBroker().start()
        try:
            assert isinstance(broker._proc, subprocess.Popen)
            assert broker.produce("t", [b"x"]) == [(0, 0)]
            [record] = caplog.records
            assert "the fork server failed, brokers start as subprocesses from now on" in record.getMessage()
            with EmbeddedBroker() as later:  # said once
                assert isinstance(later._proc, subprocess.Popen)
            assert len(caplog.records) == 1
        finally:
            broker.stop()
    assert _forkserver._server is None


def test_turned_off_by_the_environment(own_server: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "0")
    with EmbeddedBroker() as broker:
        assert isinstance(broker._proc, subprocess.Popen)
    assert _forkserver._server is None  # not even started
