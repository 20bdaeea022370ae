"""The broker process: a bad config stops it at start with one line naming the key, and so does a listener
(Kafka or admin) whose port is taken, before the broker touches its data (`strom dev-cluster` names a taken
port before it starts anything); SIGTERM and SIGINT stop it cleanly (exit 0, a log line); the ready line
appears once; the first start in a new data directory says so."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerproc import READY_MARK, BrokerProcess, free_port
from helpers import RawConnection, confluent_produce


def run_to_exit(b: BrokerProcess, timeout: float = 30.0) -> tuple[int, list[str]]:
    proc = subprocess.run(b.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return proc.returncode, [line for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("key,value", [
    ("num.partitions", "abc"),
    ("num.partitions", "0"),
    ("log.segment.bytes", "-5"),
    ("message.max.bytes", "12x"),
    ("auto.create.topics.enable", "maybe"),
    ("log.flush.interval.messages", "0"),
    ("listeners", "not a listener"),
    ("log.cleanup.policy", "shred"),
])
def test_bad_override_stops_with_one_line(tmp_path: Path, key: str, value: str) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={key: value})
    rc, lines = run_to_exit(b)
    assert rc != 0
    assert len(lines) == 1, lines
    assert key in lines[0], lines[0]
    assert "Traceback" not in lines[0] and READY_MARK not in lines[0]


def test_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server.properties"
    b = BrokerProcess(tmp_path / "data", config_file=missing)
    rc, lines = run_to_exit(b)
    assert rc != 0
    assert len(lines) == 1, lines
    assert str(missing) in lines[0] or missing.name in lines[0], lines[0]


def test_bad_value_in_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "server.properties"
    cfg.write_text("# a Kafka-style file\nbroker.id=0\nlog.retention.hours=forever\n")
    b = BrokerProcess(tmp_path / "data", config_file=cfg)
    rc, lines = run_to_exit(b)
    assert rc != 0
    assert len(lines) == 1, lines
    assert "log.retention.hours" in lines[0]


def test_malformed_override(tmp_path: Path) -> None:
    cmd = BrokerProcess(tmp_path / "data").command() + ["--override", "justakeynovalue"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode != 0
    assert len(lines) == 1 and "justakeynovalue" in lines[0], lines


def test_config_file_values_are_used(tmp_path: Path) -> None:
    cfg = tmp_path / "server.properties"
    cfg.write_text("num.partitions=3\nauto.create.topics.enable=true\n")
    b = BrokerProcess(tmp_path / "data", config_file=cfg).start()
    try:
        with RawConnection(b.bootstrap) as c:
            md = c.metadata(["from-file"], auto_create=True)
            assert len(md.topics[0].partitions) == 3
    finally:
        assert b.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    confluent_produce(b.bootstrap, "lifecycle", [{"value": b"x"}])
    with RawConnection(b.bootstrap) as idle:  # an open client connection must not block shutdown
        assert b.proc is not None
        b.proc.send_signal(sig)
        rc = b.proc.wait(30)
        idle.wait_closed(5)
    assert rc == 0, b.log_text()[-2000:]
    b.stop()
    log = b.log_text()
    assert log.count(READY_MARK) == 1, log
    after_ready = log.split(READY_MARK, 1)[1]
    assert any(w in after_ready.lower() for w in ("shutting down", "stopped", "shutdown")), log
    assert "Traceback" not in log, log
    # A clean stop leaves data that the next start serves.
    b.start()
    try:
        with RawConnection(b.bootstrap) as c:
            assert [r.value for r in c.fetch_records("lifecycle", 0)] == [b"x"]
        assert b.log_text().count(READY_MARK) == 1
    finally:
        assert b.stop() == 0


def test_port_in_use_fails_at_start(tmp_path: Path) -> None:
    first = BrokerProcess(tmp_path / "a").start()
    try:
        second = BrokerProcess(tmp_path / "b", port=first.port)
        rc, lines = run_to_exit(second)
        assert rc != 0
        assert any(str(first.port) in line for line in lines), lines
        assert first.alive()
    finally:
        assert first.stop() == 0


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A loopback port something else (this test) listens on."""
    port = free_port()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        yield port


def assert_one_line_naming(lines: list[str], *fragments: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith("strom: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in lines[0] and READY_MARK not in lines[0]


def test_a_kafka_listener_on_a_taken_port_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    with held_port() as port:
        b = BrokerProcess(tmp_path / "data", port=port)
        rc, lines = run_to_exit(b)
    assert rc != 0
    assert_one_line_naming(lines, f"listener PLAINTEXT://127.0.0.1:{port}", f"port {port}",
                           "address already in use")
    assert not (tmp_path / "data" / "meta.properties").exists()  # it stopped before loading any log


def test_the_second_listener_on_a_taken_port_is_the_one_named(tmp_path: Path) -> None:
    first = free_port()
    with held_port() as port:
        b = BrokerProcess(tmp_path / "data", port=first, overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{first},INTERNAL://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"})
        rc, lines = run_to_exit(b)
    assert rc != 0
    assert_one_line_naming(lines, f"listener INTERNAL://127.0.0.1:{port}", f"port {port}")
    # The first listener's port was let go: a broker can use it now.
    ok = BrokerProcess(tmp_path / "again", port=first).start()
    try:
        with RawConnection(ok.bootstrap) as c:
            assert int(c.api_versions().error_code) == 0
    finally:
        assert ok.stop() == 0


def test_an_admin_listener_on_a_taken_port_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    with held_port() as port:
        b = BrokerProcess(tmp_path / "data", overrides={"admin.listeners": f"http://127.0.0.1:{port}"})
        rc, lines = run_to_exit(b)
    assert rc != 0
    assert_one_line_naming(lines, f"admin listener http://127.0.0.1:{port}", f"port {port}",
                           "address already in use")
    assert not (tmp_path / "data" / "meta.properties").exists()


def test_dev_cluster_names_a_taken_port_and_starts_nothing(tmp_path: Path) -> None:
    with held_port() as port:
        # Broker 2 of 2 would listen on the held port.
        proc = subprocess.run([sys.executable, "-m", "strom.cli.main", "dev-cluster", "2", "--base-port",
                               str(port - 1), "--data-dir", str(tmp_path / "cluster")],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stdout == ""  # not even ZooKeeper was started
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert_one_line_naming(lines, f"port {port}", "broker 2", "address already in use")
    assert not (tmp_path / "cluster").exists()


def test_a_new_data_directory_is_not_reported_as_an_unclean_shutdown(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        first = b.log_text()
        assert "loading logs from" in first and "(a new directory: no logs yet)" in first, first
        assert "unclean shutdown" not in first
    finally:
        assert b.stop() == 0
    b.start()  # after a clean stop
    assert "(clean shutdown)" in b.log_text()
    b.kill()
    b.start()  # after SIGKILL: that one is unclean, and said so
    try:
        assert "(unclean shutdown)" in b.log_text()
    finally:
        assert b.stop() == 0
