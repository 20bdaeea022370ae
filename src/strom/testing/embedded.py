"""EmbeddedBroker: a real strom broker in a child process, for tests, with faults on demand.

This module imports only the standard library: the pytest plugin loads it when a fixture is first
used, and a test process should not pay for the broker's own imports (it runs in the child).
The client helpers import confluent-kafka when first called.

Brokers are forked from a warm fork server (strom.testing._forkserver), started with the first
broker of the process, so that later ones skip Python's start and the broker's imports;
``STROM_TESTING_FORK_SERVER=0`` starts each one as a fresh subprocess instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from strom.testing import _forkserver
from strom.testing._forkserver import ForkedProcess

log = logging.getLogger("strom.testing")

CONTROL_ENV = "STROM_TESTING_CONTROL"  # strom.broker.faults.ENV (not imported: it loads the broker)
_READY = re.compile(r"ready: listening on .*\(port (\d+)")
_KEPT_LOG_LINES = 20_000

# Kafka's property names, with values that make a broker quick to start and a group quick to form.
TEST_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",  # a consumer group forms at once, not after 3 s
    "offsets.topic.num.partitions": "1",  # __consumer_offsets is created in a blink
    "admin.listeners": "",  # no HTTP listener unless asked for
}

_OWNED = frozenset({"listeners", "log.dirs", "log.dir"})


class BrokerStartError(RuntimeError):
    """The broker did not start: its own last words (for a refused config, the line naming the key)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a consumer sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = -1  # milliseconds since the epoch (CreateTime or LogAppendTime)


class EmbeddedBroker:
    """A strom broker as a child process (the strom CLI's ``broker`` command, as ``python -m strom
    broker`` runs it; see _broker_main), forked from the fork server or started as a subprocess (see
    _launch), on a free 127.0.0.1 port, with its data in a new temporary directory. Use it as a
    context manager, or start() and stop().

    ``config`` takes Kafka's property names (``{"num.partitions": "3"}``); they win over the test
    defaults above. On stop the process is gone, the port closed and the directory removed.
    """

    def __init__(self, config: Mapping[str, str] | None = None, *, start_timeout: float = 30.0) -> None:
        owned = sorted(set(config or {}) & _OWNED)
        if owned:
            raise ValueError(f"EmbeddedBroker chooses {', '.join(owned)} itself (a free port, a new directory)")
        self.config: dict[str, str] = {**TEST_DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self.start_timeout = start_timeout
        self.port: int = 0
        self.data_dir: Path | None = None
        self.paused = False
        self._proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._control: socket.socket | None = None
        self._control_file: Any = None
        self._reader: threading.Thread | None = None
        self._lines: list[str] = []
        self._dropped_lines = 0  # lines no longer kept, so positions stay valid
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._live: list[subprocess.Popen[bytes] | ForkedProcess | None] = [None]  # shared with the finalizer
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> EmbeddedBroker:
        if self._proc is not None:
            raise RuntimeError("broker already started")
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="strom-testing-"))
            # Even if nobody calls stop() (a forgotten broker): when collected, or at interpreter exit.
            self._finalizer = weakref.finalize(self, _cleanup, self._live, self.data_dir)
        try:
            self._spawn(port=0)  # a free port, chosen by the broker when it binds: no race for it
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (SIGKILL if it has not stopped after 30 s) and remove its data directory."""
        self._close_clients()
        self._terminate(hard=False)
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def restart(self, hard: bool = False) -> None:
        """Stop and start again on the same port with the same data. ``hard``: SIGKILL first, so
        the broker gets no chance to flush or checkpoint (acknowledged records survive either way)."""
        if self.data_dir is None:
            raise RuntimeError("the broker was never started (or is stopped): nothing to restart")
        self._terminate(hard=hard)
        self._spawn(port=self.port)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open, nothing is answered."""
        self._require_running()
        self._proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        self.paused = True

    def resume(self) -> None:
        """Let a paused broker go on (SIGCONT); what was sent meanwhile is answered now."""
        self._require_running()
        self._proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        self.paused = False

    def inject_error(self, api: str, error: str, count: int = 1) -> None:
        """Answer the next ``count`` requests of ``api`` (Kafka's name: "Produce", "Fetch",
        "JoinGroup", ...) with ``error`` (Kafka's name: "NOT_LEADER_OR_FOLLOWER", ...), in that
        API's own response. Queued errors are forgotten when the broker restarts."""
        self._command({"op": "inject_error", "api": api, "error": error, "count": count})

    def drop_connections(self) -> int:
        """Close every client connection now (clients reconnect); returns how many there were."""
        return int(self._command({"op": "drop_connections"})["closed"])

    # ------------------------------------------------------------------ the broker's log

    @property
    def log_position(self) -> int:
        """How many log lines the broker has written so far (a mark for ``log_since``)."""
        with self._lock:
            return self._dropped_lines + len(self._lines)

    def log_since(self, position: int = 0) -> list[str]:
        """The broker's log lines from ``position`` on (all of them from 0, restarts included)."""
        with self._lock:
            return self._lines[max(0, position - self._dropped_lines):]

    def _pump(self, stream: Any, ready: threading.Event, port: list[int]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock:
                self._lines.append(line)
                if len(self._lines) > _KEPT_LOG_LINES:
                    cut = len(self._lines) - _KEPT_LOG_LINES // 2
                    del self._lines[:cut]
                    self._dropped_lines += cut
            if not ready.is_set() and (m := _READY.search(line)):
                port.append(int(m.group(1)))
                ready.set()

    # ------------------------------------------------------------------ the child process

    def _broker_args(self, port: int) -> list[str]:
        """The strom CLI's arguments: its ``broker`` command with our settings."""
        assert self.data_dir is not None
        settings = {**self.config, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                    "log.dirs": str(self.data_dir)}
        args = ["broker"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def _launch(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes] | ForkedProcess:
        """The broker process: forked from the warm fork server (see _forkserver) when it can be,
        else a fresh ``python -m strom.testing._broker_main`` (STROM_TESTING_FORK_SERVER=0 asks for
        that always). Either way its output (stdout and stderr) comes out of its ``stdout``."""
        if not _forkserver.disabled():
            try:
                # Started with the environment of this moment; a later broker whose environment
                # differs where a fork cannot apply it any more starts as a subprocess.
                server = _forkserver.get({k: v for k, v in env.items() if k != CONTROL_ENV})
                if server is not None and server.compatible(env):
                    return server.spawn(args, env)
            except _forkserver.ForkServerError as e:
                _forkserver.discard(str(e))
                # Logged, not warned: under -W error a warning would fail the start it falls back from.
                log.warning("the fork server failed, brokers start as subprocesses from now on: %s", e)
        # A session of its own: the terminal's Ctrl-C goes to pytest, which stops the broker.
        return subprocess.Popen([sys.executable, "-m", "strom.testing._broker_main", *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _spawn(self, port: int) -> None:
        # The control channel: our loopback port and a fresh token, known only to the child.
        listener = socket.create_server(("127.0.0.1", 0))
        token = secrets.token_hex(16)
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               CONTROL_ENV: f"127.0.0.1:{listener.getsockname()[1]}:{token}"}
        ready = threading.Event()
        bound: list[int] = []
        start = self.log_position
        try:
            self._proc = self._launch(self._broker_args(port), env)
            self._live[0] = self._proc
            self._reader = threading.Thread(target=self._pump, args=(self._proc.stdout, ready, bound),
                                            name=f"strom-broker-log-{self._proc.pid}", daemon=True)
            self._reader.start()
            deadline = time.monotonic() + self.start_timeout
            listener.settimeout(0.02)
            while self._control is None or not ready.is_set():
                if self._control is None:
                    self._control, self._control_file = self._accept(listener, token, self._proc.pid)
                elif ready.wait(0.02):
                    break
                if self._proc.poll() is not None:
                    self._reader.join(5)
                    raise BrokerStartError(self._last_words(start))
                if time.monotonic() > deadline:
                    raise BrokerStartError(f"strom broker not ready within {self.start_timeout:g} s:\n"
                                           + "\n".join(self.log_since(start)[-30:]))
        except BaseException:
            self._terminate(hard=True)
            raise
        finally:
            listener.close()  # one child, one connection: nothing else may reach this port later
        self.port = bound[0]

    @staticmethod
    def _accept(listener: socket.socket, token: str, pid: int) -> tuple[socket.socket | None, Any]:
        """The child's connection, once it has shown the token and its pid; (None, None) until then."""
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            return None, None
        conn.settimeout(5)
        file = conn.makefile("rb")
        try:
            hello = json.loads(file.readline() or b"{}")
        except (OSError, ValueError):
            hello = {}
        if hello.get("hello") != token or hello.get("pid") != pid:
            file.close()  # not our child: hang up
            conn.close()
            return None, None
        conn.settimeout(30)
        return conn, file

    def _last_words(self, start: int) -> str:
        lines = [line for line in self.log_since(start) if line.strip()]
        refused = [line for line in lines if line.startswith("strom: ")]
        if refused:
            return refused[-1]
        return "strom broker exited before it was ready:\n" + "\n".join(lines[-30:])

    def _terminate(self, hard: bool) -> None:
        proc, self._proc = self._proc, None
        self._live[0] = None
        if proc is not None and proc.poll() is None:
            if hard:
                proc.kill()
            else:
                if self.paused:
                    proc.send_signal(signal.SIGCONT)  # a stopped process would not act on anything
                if self._control is not None:
                    # Closing the control channel stops the broker cleanly. (Not SIGTERM: the broker
                    # installs its handler only after it says it is ready, so right after start a
                    # SIGTERM would end it uncleanly.)
                    self._close_control()
                else:
                    proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_control()
        if proc is not None and proc.stdout is not None:
            if self._reader is not None:
                self._reader.join(5)
            proc.stdout.close()
        self._reader = None
        self.paused = False

    def _close_control(self) -> None:
        if self._control is not None:
            with contextlib.suppress(OSError):
                self._control_file.close()  # the socket's descriptor closes with its last user
                self._control.close()
            self._control = None
            self._control_file = None

    def _require_running(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("the broker is not running")

    def _command(self, message: dict[str, Any]) -> dict[str, Any]:
        self._require_running()
        if self.paused:
            raise RuntimeError("the broker is paused: resume() it first")
        assert self._control is not None and self._control_file is not None
        self._control.sendall(json.dumps(message).encode() + b"\n")
        line = self._control_file.readline()
        if not line:
            raise RuntimeError("the broker closed its control channel (did it stop?)")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise ValueError(answer.get("error", "refused"))
        return answer

    # ------------------------------------------------------------------ client helpers (confluent-kafka)

    def _client(self, kind: str) -> Any:
        """One long-lived AdminClient / Producer per broker (librdkafka reconnects after restarts)."""
        client = self._clients.get(kind)
        if client is None:
            from confluent_kafka import Producer
            from confluent_kafka.admin import AdminClient

            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "client.id": f"strom-testing-{kind}",
                                    "log.connection.close": False}  # restarts and drops are on purpose
            if kind == "producer":
                client = Producer({**conf, "acks": "all", "linger.ms": 0, "message.timeout.ms": 30_000})
            else:
                client = AdminClient(conf)
            self._clients[kind] = client
        return client

    def _close_clients(self) -> None:
        producer = self._clients.pop("producer", None)
        if producer is not None and self._proc is not None and not self.paused:
            producer.flush(5)
        self._clients.clear()

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> None:
        """Create ``name`` (replication factor 1) with topic configs by Kafka's names; raises if it exists."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1,
                         config={k: str(v) for k, v in (config or {}).items()})
        futures = self._client("admin").create_topics([topic], request_timeout=timeout)
        futures[name].result(timeout)

    def produce(self, topic: str, values: Iterable[bytes | str | tuple[bytes | str | None, bytes | str | None]],
                timeout: float = 30.0) -> list[tuple[int, int]]:
        """Produce each value (bytes, or a (key, value) pair) with acks=all and wait for every
        acknowledgement; returns (partition, offset) of each, in order. Raises on any failure."""
        producer = self._client("producer")
        results: list[Any] = []

        def delivered(index: int) -> Any:
            return lambda err, msg: results.append((index, err, msg))

        count = 0
        for i, item in enumerate(values):
            key, value = item if isinstance(item, tuple) else (None, item)
            producer.produce(topic, value=value, key=key, on_delivery=delivered(i))
            count += 1
        deadline = time.monotonic() + timeout
        while len(results) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count - len(results)} of {count} records to {topic} not acknowledged "
                                   f"within {timeout:g} s")
            producer.poll(0.05)
        failed = [(i, err) for i, err, _ in results if err is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} of {count} records to {topic} failed, first: {failed[0][1]}")
        return [(msg.partition(), msg.offset()) for _, _, msg in sorted(results, key=lambda r: r[0])]

    def _partitions(self, topic: str, timeout: float) -> list[int]:
        metadata = self._client("admin").list_topics(topic, timeout=timeout).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(f"topic {topic}: {metadata.error}")
        return sorted(metadata.partitions)

    def records(self, topic: str, timeout: float = 30.0) -> list[Record]:
        """Every record now in ``topic``: partition by partition, in offset order."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "strom-testing-records",
                             "enable.auto.commit": False, "enable.partition.eof": False})
        try:
            wanted: dict[int, int] = {}
            starts = []
            for p in self._partitions(topic, timeout):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                if high > low:
                    wanted[p] = high
                    starts.append(TopicPartition(topic, p, low))
            out: list[Record] = []
            if not starts:
                return out
            consumer.assign(starts)
            deadline = time.monotonic() + timeout
            while wanted:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"records of {topic} not all read within {timeout:g} s: missing {wanted}")
                for msg in consumer.consume(1000, 0.1):
                    if msg.error() is not None:
                        raise RuntimeError(f"reading {topic}: {msg.error()}")
                    p, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                    if p not in wanted or offset >= wanted[p]:
                        continue
                    headers: Any = msg.headers() or []
                    out.append(Record(topic, p, offset, _as_bytes(msg.key()), _as_bytes(msg.value()),
                                      [(k, _as_bytes(v)) for k, v in headers], msg.timestamp()[1]))
                # Done with a partition when the consumer's position reaches the end it had: offsets
                # can be missing before it (compaction), so counting records would not do.
                for tp in consumer.position([TopicPartition(topic, p) for p in wanted]):
                    if tp.offset >= wanted[tp.partition]:
                        del wanted[tp.partition]
            out.sort(key=lambda r: (r.partition, r.offset))
            return out
        finally:
            consumer.close()

    def committed(self, group: str, topic: str, timeout: float = 30.0) -> dict[int, int]:
        """The offsets ``group`` has committed for ``topic``: partition -> offset (committed ones only)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": group,
                             "enable.auto.commit": False})
        try:
            asked = [TopicPartition(topic, p) for p in self._partitions(topic, timeout)]
            return {tp.partition: tp.offset for tp in consumer.committed(asked, timeout=timeout) if tp.offset >= 0}
        finally:
            consumer.close()

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self._proc is not None else "stopped"
        return f"EmbeddedBroker({self.bootstrap_servers}, {state}, data_dir={self.data_dir})"


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _cleanup(procs: list[subprocess.Popen[bytes] | ForkedProcess | None], data_dir: Path) -> None:
    """Last resort for a broker nobody stopped: kill it, remove its directory."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(data_dir, ignore_errors=True)
