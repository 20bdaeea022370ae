"""Ports for the processes the tests start that must keep one port across restarts (brokers,
ZooKeeper, Spark's master): taken from a range below the kernel's ephemeral range, so that no
bind(0) and no outgoing connection of any process is ever given one of them.

Each pytest-xdist worker takes its ports from a slice of its own, and a port is claimed with a lock
file (``/tmp/strom-test-ports/<port>``, holding the claimer's pid) before it is handed out, so two
test runs on one machine do not share one either. A claim of a process that has died is taken over.
A port something else already listens on is skipped.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
from pathlib import Path

_LOCKS = Path(os.environ.get("STROM_TEST_PORT_LOCKS", "/tmp/strom-test-ports"))
_LOWEST = 15000
_claimed: list[int] = []
_next: int | None = None


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> range:
    """This worker's ports: an equal share of [_LOWEST, the ephemeral range's start)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    top = _ephemeral_low()
    size = max(64, (top - _LOWEST) // max(count, 1))
    start = _LOWEST + (index % max(count, 1)) * size
    return range(start, min(start + size, top))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(port: int) -> bool:
    _LOCKS.mkdir(parents=True, exist_ok=True)
    lock = _LOCKS / str(port)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(lock.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner == os.getpid() or (owner and _alive(owner)):
                return False
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()  # its claimer is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker and ZooKeeper bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserved_port() -> int:
    """A loopback port of this test process's own, for as long as it lives: never handed out twice."""
    global _next
    ports = _slice()
    if _next is None:
        _next = ports.start
    for _ in range(len(ports)):
        port = _next
        _next = ports.start + (_next + 1 - ports.start) % len(ports)
        if port in _claimed:
            continue
        if _claim(port):
            if _bindable(port):
                _claimed.append(port)
                return port
            (_LOCKS / str(port)).unlink(missing_ok=True)
    raise RuntimeError(f"no free port left in {ports}")


def release_all() -> None:
    """At the end of the test process: its claims go (a claim of a dead process is taken over anyway)."""
    for port in _claimed:
        lock = _LOCKS / str(port)
        with contextlib.suppress(OSError, ValueError):
            if int(lock.read_text()) == os.getpid():
                lock.unlink()
    _claimed.clear()


atexit.register(release_all)
