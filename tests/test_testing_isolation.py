"""Fault injection exists only in brokers strom.testing starts. A broker started with plain
``strom broker`` listens on its Kafka port only, has no control channel, takes no configuration key
that enables one, and closes a connection that sends control commands to its Kafka port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from brokerproc import BrokerProcess
from confluent_kafka import Producer
from helpers import RawConnection, remote_ports, socket_inodes

from strom.config.definitions import BROKER_CONFIGS
from strom.testing import EmbeddedBroker
from strom.testing._forkserver import DISABLE_ENV, ForkedProcess
from strom.testing.embedded import CONTROL_ENV

pytestmark = pytest.mark.timeout(60)

LISTEN, ESTABLISHED = "0A", "01"


def tcp_sockets(pid: int) -> list[tuple[str, int]]:
    """(state, local port) of each TCP socket the process holds."""
    inodes = socket_inodes(pid)
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                out.append((fields[3], int(fields[1].rsplit(":", 1)[1], 16)))
    return out


def produce_works(bootstrap: str) -> bool:
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
    reports: list[object] = []
    p.produce("plain", b"x", on_delivery=lambda err, msg: reports.append(err))
    p.flush(15)
    return reports == [None]


FAULT_LOOKING_KEYS = {"strom.testing.control": "127.0.0.1:1:token", "fault.injection.enable": "true",
                      "testing.faults": "true", "inject.error": "Produce:NOT_LEADER_OR_FOLLOWER"}


def test_plain_broker_has_no_way_in(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(overrides={"admin.listeners": "", **FAULT_LOOKING_KEYS})
    assert broker.proc is not None
    pid = broker.proc.pid
    # One listening socket, the Kafka port; no connection of its own (a control channel would be one).
    assert tcp_sockets(pid) == [(LISTEN, broker.port)]
    log = broker.log_text()
    assert "fault injection enabled" not in log
    for key in FAULT_LOOKING_KEYS:  # unknown keys: accepted with Kafka's warning, and nothing more
        assert f"The configuration '{key}' was supplied but isn't a known config." in log
    words = {"fault", "faults", "inject", "injection", "testing"}
    assert not [d.name for d in BROKER_CONFIGS if words & set(d.name.split("."))]  # no key to turn it on

    # The control protocol sent to the Kafka port is a malformed frame: the connection is closed.
    for message in ({"hello": "token", "pid": pid}, {"op": "inject_error", "api": "Produce",
                                                     "error": "TOPIC_AUTHORIZATION_FAILED", "count": 5}):
        with RawConnection(broker.bootstrap, timeout=5) as raw:
            raw.send_bytes(json.dumps(message).encode() + b"\n")
            assert raw.wait_closed(5)
    assert produce_works(broker.bootstrap)  # still a healthy broker, and nothing was injected
    assert "injected" not in broker.log_text()


def test_control_variable_is_loopback_only(tmp_path: Path) -> None:
    # Even the environment variable cannot point a broker at a control channel elsewhere.
    env = {**os.environ, CONTROL_ENV: "192.0.2.1:9:token"}
    cmd = [sys.executable, "-m", "strom", "broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
           "--override", f"log.dirs={tmp_path}", "--override", "admin.listeners="]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "the control channel is loopback only" in result.stderr


@pytest.mark.parametrize("fork_server", ["1", "0"], ids=["forked", "subprocess"])
def test_embedded_broker_channel_is_private(fork_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, fork_server)
    with EmbeddedBroker() as broker:
        assert broker.pid is not None
        assert isinstance(broker._proc, ForkedProcess) == (fork_server == "1")
        sockets = tcp_sockets(broker.pid)
        # Its Kafka port, and one connection out: the control channel to this process.
        assert sorted(state for state, _ in sockets) == [ESTABLISHED, LISTEN]
        assert (LISTEN, broker.port) in sockets
        [control_port] = remote_ports(broker.pid)
        environ = Path(f"/proc/{broker.pid}/environ").read_bytes().split(b"\0")
        specs = [v.decode().split("=", 1)[1] for v in environ if v.startswith(CONTROL_ENV.encode() + b"=")]
        if fork_server == "1":
            assert specs == []  # handed to the fork server's child in its request, never exec'd with
        else:
            [spec] = specs
            host, port, _ = spec.rsplit(":", 2)
            assert (host, int(port)) == ("127.0.0.1", control_port)
        # The port the child was told to connect to is closed once it has: nobody else gets in.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", control_port), timeout=5)


def test_control_listener_refuses_a_wrong_token() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    with listener, socket.create_connection(listener.getsockname(), timeout=5) as impostor:
        impostor.sendall(json.dumps({"hello": "guessed", "pid": os.getpid()}).encode() + b"\n")
        assert EmbeddedBroker._accept(listener, "the-real-token", os.getpid()) == (None, None)
        assert impostor.recv(1) == b""  # hung up on
