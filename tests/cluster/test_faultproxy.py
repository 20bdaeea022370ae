"""The fault-injecting proxy itself, against a small echo server: pass, reset, blackhole, heal, a
cut limited to some processes, and that it stops (on demand and by itself)."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from faultproxy import FaultProxy
from helpers import wait_until

pytestmark = pytest.mark.timeout(60)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # resets are what these tests make happen


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(echo_port: int) -> Iterator[FaultProxy]:
    with FaultProxy(echo_port, "echo", lifetime_s=60) as p:
        yield p


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.settimeout(0.5)
    return s


def _echoes(s: socket.socket, payload: bytes = b"ping") -> bool:
    """True when the payload comes back; False when nothing comes within the socket's timeout."""
    s.sendall(payload)
    got = b""
    try:
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed")
            got += chunk
    except TimeoutError:
        return False
    return got == payload


def _is_reset(s: socket.socket) -> bool:
    """The connection is dead: a reset or an EOF on the next send/recv."""
    try:
        s.sendall(b"x")
        return s.recv(10) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _new_connection_is_reset(port: int) -> bool:
    try:
        s = _connect(port)
    except ConnectionResetError:
        return True  # reset before connect() returned
    with s:
        return _is_reset(s)


def test_passes_bytes_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy.port) as s:
        assert _echoes(s, b"a" * 200_000)
    wait_until(lambda: proxy.forwarded_bytes >= 400_000, 5, what="the byte count")
    assert proxy.state == "pass"


def test_reset_kills_open_connections_and_refuses_new_ones_until_heal(proxy: FaultProxy) -> None:
    with _connect(proxy.port) as s:
        assert _echoes(s)
        proxy.cut("reset")
        assert _is_reset(s)
    assert _new_connection_is_reset(proxy.port)
    proxy.heal()
    with _connect(proxy.port) as s:
        assert _echoes(s)


def test_blackhole_hangs_connections_and_heal_resets_the_hung_ones(proxy: FaultProxy) -> None:
    with _connect(proxy.port) as old:
        assert _echoes(old)
        proxy.cut("blackhole")
        assert not _echoes(old)  # no error, no data: it just hangs
        with _connect(proxy.port) as new:  # a new connection is accepted, then hangs too
            assert not _echoes(new)
            assert proxy.dropped_bytes > 0
            proxy.heal()
            assert _is_reset(old) and _is_reset(new)
    with _connect(proxy.port) as s:
        assert _echoes(s)


def test_cut_limited_to_some_processes(proxy: FaultProxy) -> None:
    """Only connections opened by the given pids are cut; others pass, old and new."""
    with _connect(proxy.port) as s:
        assert _echoes(s)
        proxy.cut("blackhole", from_pids={os.getppid()})  # not this process: nothing changes
        assert _echoes(s)
        with _connect(proxy.port) as other:
            assert _echoes(other)
        proxy.cut("blackhole", from_pids={os.getpid()})
        assert not _echoes(s)
        with _connect(proxy.port) as new:
            assert not _echoes(new)
    proxy.heal()


def test_stops_on_demand_and_by_itself(echo_port: int) -> None:
    p = FaultProxy(echo_port, "short", lifetime_s=1).start()
    with _connect(p.port) as s:
        assert _echoes(s)
        wait_until(lambda: not p.running, 5, what="the proxy to stop after its lifetime")
        assert _is_reset(s)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p.port), timeout=2)
    with pytest.raises(RuntimeError):
        p.cut()
    q = FaultProxy(echo_port, "stopped").start()
    started = time.monotonic()
    q.stop()
    assert not q.running and time.monotonic() - started < 5
