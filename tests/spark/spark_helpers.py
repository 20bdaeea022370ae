"""Shortcuts for the Spark tests: create topics, produce with delivery reports, consume everything."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokerproc import die_with_parent_hook


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int  # Spark's: 0 CreateTime, 1 LogAppendTime
    headers: tuple[tuple[str, bytes | None], ...] | None


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)


def produce(bootstrap: str, records: list[dict[str, Any]], **conf: Any) -> list[Produced]:
    """Produce records (dicts of topic, value, and optional key, partition, timestamp, headers); returns
    what the broker acknowledged, with offsets and timestamps from the delivery reports."""
    from confluent_kafka import Producer

    out: list[Produced] = []
    errors: list[Any] = []

    def reporter(headers: Any) -> Any:
        def report(err: Any, msg: Any) -> None:  # delivery reports do not carry the headers: keep ours
            if err is not None:
                errors.append(err)
                return
            ts_type, ts = msg.timestamp()
            out.append(Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts, ts_type - 1,
                                tuple(headers) if headers else None))
        return report

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if r.get(k) is not None}
        producer.produce(r["topic"], value=r.get("value"), on_delivery=reporter(r.get("headers")), **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return out


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """Read `expected` records of `topic` from the beginning with a plain consumer."""
    import uuid

    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got


# --------------------------------------------------------------------------------------------------
# Spark drivers as subprocesses (stream_job.py): started in their own process group, killed whole.

JOB = Path(__file__).parent / "stream_job.py"


def start_job(args: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
    """Run stream_job.py with `args`, output appended to `log`, in a new process group (driver + JVM)."""
    full_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", **env}
    with log.open("ab") as f:
        return subprocess.Popen([sys.executable, str(JOB), *args], stdout=f, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True, preexec_fn=die_with_parent_hook())


def batches(ck: Path, kind: str) -> set[int]:
    """The batch ids in a checkpoint's `offsets` (planned) or `commits` (done) log."""
    d = ck / kind
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a job's process group and wait until every process of it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the JVM is in the same group; wait until it is gone too
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("the Spark driver's process group survived SIGKILL")


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of `topic` a read_committed consumer sees, read to the end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False})
    got: list[tuple[bytes, bytes]] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    got.append((m.key(), m.value()))
                elif m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(m.partition())
    finally:
        c.close()
    return got
