"""The broker process: a bad config stops it at start with one line naming the key; SIGTERM and SIGINT stop it
cleanly (exit 0, a log line); the ready line appears once."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from brokerproc import READY_MARK, BrokerProcess
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
