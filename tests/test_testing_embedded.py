"""EmbeddedBroker's life cycle, its test defaults and its client helpers."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from strom.testing import BrokerStartError, EmbeddedBroker, Record

pytestmark = pytest.mark.timeout(60)


def port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def pid_gone(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return False


def test_context_manager_cleans_up_even_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="test body failed"), EmbeddedBroker() as broker:
        pid, port, data_dir = broker.pid, broker.port, broker.data_dir
        assert pid is not None and data_dir is not None and data_dir.is_dir()
        assert broker.bootstrap_servers == f"127.0.0.1:{port}" and port > 0
        assert not port_closed(port)
        raise RuntimeError("test body failed")
    assert pid_gone(pid)
    assert port_closed(port)
    assert not data_dir.exists()


def test_start_and_stop() -> None:
    broker = EmbeddedBroker()
    assert broker.start() is broker
    pid, data_dir = broker.pid, broker.data_dir
    assert pid is not None and data_dir is not None
    broker.stop()
    assert pid_gone(pid) and not data_dir.exists() and broker.pid is None
    assert any("stopped cleanly" in line for line in broker.log_since(0)), broker.log_since(0)


def test_refused_config_raises_at_once_naming_the_key() -> None:
    started = time.monotonic()
    broker = EmbeddedBroker({"num.partitions": "zero"})
    with pytest.raises(BrokerStartError) as info:
        broker.start()
    assert time.monotonic() - started < 10  # the broker's refusal, not a time-out
    message = str(info.value)
    assert "\n" not in message and "num.partitions" in message and message.startswith("strom: ")
    assert broker.pid is None and broker.data_dir is None  # nothing left behind


def test_the_port_and_the_directory_are_not_config() -> None:
    with pytest.raises(ValueError, match="chooses listeners, log.dirs itself"):
        EmbeddedBroker({"listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/x"})


def test_start_again_after_stop_gets_a_new_directory() -> None:
    broker = EmbeddedBroker()
    with broker:
        first_dir = broker.data_dir
        broker.create_topic("gone")
    assert first_dir is not None and not first_dir.exists()
    with broker:
        assert broker.data_dir != first_dir
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert "gone" not in admin.list_topics(timeout=10).topics  # a new broker, not the old data


def test_test_defaults_and_overrides() -> None:
    with EmbeddedBroker({"num.partitions": "3", "admin.listeners": "http://127.0.0.1:0"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        resource = ConfigResource("broker", "0")
        configs = admin.describe_configs([resource])[resource].result(10)
        assert configs["group.initial.rebalance.delay.ms"].value == "0"
        assert configs["offsets.topic.num.partitions"].value == "1"
        assert configs["num.partitions"].value == "3"
        assert any("admin listener ready on http://127.0.0.1:" in line for line in broker.log_since(0))
        broker.produce("auto", [b"a"])
        assert len(admin.list_topics("auto", timeout=10).topics["auto"].partitions) == 3
    with EmbeddedBroker() as broker:
        assert any("admin listener disabled" in line for line in broker.log_since(0))


def test_helpers_create_produce_read_and_report_commits() -> None:
    with EmbeddedBroker() as broker:
        broker.create_topic("helpers", partitions=2, config={"retention.ms": "3600000"})
        with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
            broker.create_topic("helpers")
        acks = broker.produce("helpers", [(b"k1", b"v1"), (b"k1", b"v2"), ("k2", "text"), b"no key"])
        assert len(acks) == 4 and {p for p, _ in acks} <= {0, 1}
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce("helpers", key=b"k3", value=b"with headers", partition=1, headers=[("h", b"1")], timestamp=1234)
        assert p.flush(10) == 0

        records = broker.records("helpers")
        assert len(records) == 5
        assert [(r.partition, r.offset) for r in records] == sorted((r.partition, r.offset) for r in records)
        by_value = {r.value: r for r in records}
        assert by_value[b"with headers"] == Record("helpers", 1, by_value[b"with headers"].offset, b"k3",
                                                   b"with headers", [("h", b"1")], 1234)
        assert by_value[b"text"].key == b"k2" and by_value[b"no key"].key is None
        assert [r.value for r in records if r.key == b"k1"] == [b"v1", b"v2"]  # one partition, in order
        assert all(r.topic == "helpers" and r.timestamp > 0 for r in records)

        assert broker.committed("nobody", "helpers") == {}
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "readers",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["helpers"])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 5 and time.monotonic() < deadline:
            msg = c.poll(0.1)
            seen += msg is not None and msg.error() is None
        c.commit(asynchronous=False)
        c.close()
        counts = {p: sum(r.partition == p for r in records) for p in (0, 1)}
        assert broker.committed("readers", "helpers") == {p: n for p, n in counts.items() if n}


def test_paused_broker_refuses_commands_until_resumed() -> None:
    with EmbeddedBroker() as broker:
        broker.pause()
        assert broker.paused
        with pytest.raises(RuntimeError, match="paused"):
            broker.drop_connections()
        broker.resume()
        assert broker.drop_connections() >= 0
        broker.pause()  # stop() resumes it first, so it can stop cleanly
    assert any("stopped cleanly" in line for line in broker.log_since(0))


def test_a_broker_stops_when_its_test_process_goes_away() -> None:
    # The control channel closing is the broker's signal that nobody will stop it: it stops itself.
    broker = EmbeddedBroker().start()
    try:
        pid = broker.pid
        assert pid is not None and broker._control is not None
        broker._control_file.close()
        broker._control.close()
        deadline = time.monotonic() + 20
        while not any("stopped cleanly" in line for line in broker.log_since(0)):
            assert time.monotonic() < deadline, "the broker kept running"
            time.sleep(0.05)
        assert any("control channel closed: stopping" in line for line in broker.log_since(0))
    finally:
        broker.stop()
