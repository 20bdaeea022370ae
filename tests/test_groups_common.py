"""Shared pieces of the consumer group end-to-end tests (no tests here).

- ``start_group_broker``: a broker with small group timeouts allowed, so crash tests are quick.
- ``ConsumerProcess``: a confluent-kafka group member in its own process (this file run as a script),
  reporting what it is assigned, processes and commits as JSON lines, so a test can SIGKILL it.
- ``poll_all``: drive several in-process consumers from one thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from brokerproc import BrokerProcess, die_with_parent_hook  # noqa: E402
from helpers import wait_until  # noqa: E402

GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",  # members of crash tests die in seconds, not minutes
    "offsets.topic.num.partitions": "3",
}

# Client settings for members that must notice a dead peer or a new partition quickly.
FAST_CONSUMER = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 300,
    "topic.metadata.refresh.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
}


def start_group_broker(data_dir: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(data_dir, overrides={**GROUP_BROKER_OVERRIDES, **overrides}).start()


def group_broker_fixture(tmp_path_factory: Any) -> Iterator[BrokerProcess]:
    b = start_group_broker(tmp_path_factory.mktemp("groups") / "data")
    try:
        yield b
    finally:
        b.stop()


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create topics and wait until metadata for each (asked by name) shows all partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()], request_timeout=15).values():
        f.result(timeout=20)
    for name, n in topics.items():
        def visible(name: str = name, n: int = n) -> bool:
            t = admin.list_topics(topic=name, timeout=10).topics.get(name)
            return t is not None and t.error is None and len(t.partitions) == n
        wait_until(visible, 15, what=f"topic {name} in metadata")


def values(n: int, start: int = 0, prefix: str = "v") -> list[dict[str, Any]]:
    return [{"key": f"k{i}".encode(), "value": f"{prefix}{i}".encode()} for i in range(start, start + n)]


def poll_all(consumers: list[Any], until: Callable[[], bool], timeout: float, on_message: Callable[[int, Any], None],
             what: str = "") -> None:
    """Poll every consumer in turn (callbacks run inside poll) until ``until()`` or the timeout."""
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {what}")
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                on_message(i, msg)


class ConsumerProcess:
    """A group member in a child process; ``events`` fills in as it reports."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, base: dict[str, Any] | None = None,
                 **config: Any) -> None:
        self.name = name
        base = FAST_CONSUMER if base is None else base
        settings = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, **base, **config}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, topic, json.dumps(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent_hook(),
        )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self._lock:
                    self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> set[int]:
        """Current partitions, from the assign/revoke events (eager and incremental alike)."""
        owned: set[int] = set()
        for e in self.snapshot():
            if e["ev"] == "assign":
                owned |= set(e["parts"])
            elif e["ev"] == "revoke":
                owned -= set(e["parts"])
        return owned

    def processed(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "rec"]

    def committed_ok(self) -> set[tuple[int, int]]:
        return {(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "ok"}

    def close(self, timeout: float = 20.0) -> None:
        """Graceful: the member closes its consumer (LeaveGroup for dynamic members)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout)
        self._reader.join(5)

    def kill(self) -> None:
        """A crash: no LeaveGroup, no final commit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)


def _child(topic: str, settings: dict[str, Any]) -> None:
    """Consume ``topic``; report every record before committing it, and the commit's outcome."""
    from confluent_kafka import Consumer, KafkaException

    def emit(**event: Any) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    consumer = Consumer(settings)
    consumer.subscribe([topic], on_assign=lambda c, ps: emit(ev="assign", parts=[p.partition for p in ps]),
                       on_revoke=lambda c, ps: emit(ev="revoke", parts=[p.partition for p in ps]),
                       on_lost=lambda c, ps: emit(ev="revoke", parts=[p.partition for p in ps]))
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        emit(ev="rec", p=msg.partition(), o=msg.offset(), v=msg.value().decode())
        try:
            consumer.commit(message=msg, asynchronous=False)
            emit(ev="ok", p=msg.partition(), o=msg.offset())
        except KafkaException as e:
            emit(ev="fail", p=msg.partition(), o=msg.offset(), err=str(e))
    consumer.close()
    emit(ev="closed")


if __name__ == "__main__":
    _child(sys.argv[1], json.loads(sys.argv[2]))
