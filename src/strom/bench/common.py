"""Pieces shared by the workloads: options, client configs, the topic, payloads and the progress bar."""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from strom.cli.common import ClientOptions, Failure, base_config, check_reachable, kafka_error_message

# librdkafka's own defaults, spelled out so the summary can say what was used.
DEFAULT_LINGER_MS = 5
DEFAULT_BATCH_SIZE = 1_000_000


@dataclass(frozen=True)
class BenchOptions:
    client: ClientOptions
    topic: str
    records: int
    record_size: int
    partitions: int | None = None  # create the topic with this many partitions if it is missing
    replication_factor: int = 1
    acks: str = "all"
    linger_ms: int = DEFAULT_LINGER_MS
    batch_size: int = DEFAULT_BATCH_SIZE
    compression: str = "none"
    target_rate: float = 0.0  # records/s; 0 = as fast as possible
    duration: float = 0.0  # stop sending (or reading) after this many seconds; 0 = no limit
    timeout: float = 30.0  # delivery timeout; and how long a consumer waits without a new record
    fetch_wait_max_ms: int | None = None  # consumer fetch.wait.max.ms (None: client default, 500 ms)
    progress: bool = True
    producer_properties: dict[str, str] = field(default_factory=dict)
    consumer_properties: dict[str, str] = field(default_factory=dict)

    def settings(self, mode: str) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "record_size": self.record_size}
        if mode in ("produce", "e2e"):
            out.update(acks=self.acks, linger_ms=self.linger_ms, batch_size=self.batch_size,
                       compression=self.compression, target_rate=self.target_rate)
        if mode in ("consume", "e2e"):
            out["fetch_wait_max_ms"] = self.fetch_wait_max_ms
        out["duration_limit_s"] = self.duration or None
        return out


def producer_config(opts: BenchOptions, **extra: Any) -> dict[str, Any]:
    config = base_config(opts.client, **{
        "client.id": "strom-bench-producer",
        "acks": opts.acks,
        "linger.ms": opts.linger_ms,
        "batch.size": opts.batch_size,
        "compression.type": opts.compression,
        "message.timeout.ms": int(opts.timeout * 1000),
        # Enough room that a fast producer is never stalled by the local queue before the broker is.
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        **extra,
    })
    config.update(opts.producer_properties)
    return config


# For the consume workload: librdkafka stops fetching a partition once queued.min.messages (100,000)
# records wait in its local queue and then backs off for fetch.queue.backoff.ms (1,000 ms), so with
# small records the consumer idles for most of a second at a time and every broker measures the same
# ~170,000 records/s. kafka-consumer-perf-test's Java consumer has no such pause; these keep the fetch
# pipeline full instead (override with -X).
THROUGHPUT_CONSUMER = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10}


def consumer_config(opts: BenchOptions, **extra: Any) -> dict[str, Any]:
    # librdkafka wants a group.id even for assign(); nothing is committed and no group is joined.
    config = base_config(opts.client, **{
        "client.id": "strom-bench-consumer",
        "group.id": f"strom-bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        **extra,
    })
    if opts.fetch_wait_max_ms is not None:
        config["fetch.wait.max.ms"] = opts.fetch_wait_max_ms
    config.update(opts.consumer_properties)
    return config


def ensure_topic(opts: BenchOptions, create: bool = True) -> int:
    """Make sure the topic exists (creating it with ``--partitions`` if it is missing) and every partition
    has a leader; return its partition count."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    check_reachable(opts.client)
    admin = AdminClient(base_config(opts.client, **{"client.id": "strom-bench-admin"}))
    deadline = time.monotonic() + max(15.0, opts.client.connect_timeout)
    created = False
    while True:
        try:
            md = admin.list_topics(opts.topic, timeout=opts.client.connect_timeout)
        except KafkaException as e:
            raise Failure(f"cannot get metadata from {opts.client.bootstrap}: {kafka_error_message(e.args[0])}") from None
        tmd = md.topics.get(opts.topic)
        err = tmd.error if tmd is not None else None
        missing = tmd is None or (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART) \
            or (err is None and not tmd.partitions)
        if missing and not created:
            if not create:
                raise Failure(f"topic '{opts.topic}' does not exist")
            new = NewTopic(opts.topic, num_partitions=opts.partitions or 1,
                           replication_factor=opts.replication_factor)
            try:
                admin.create_topics([new], operation_timeout=10.0)[opts.topic].result(30.0)
            except KafkaException as e:
                kerr = e.args[0]
                if kerr.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise Failure(f"cannot create topic '{opts.topic}': {kafka_error_message(kerr)}") from None
            created = True
            continue
        if tmd is not None and not missing and err is None \
                and all(p.leader >= 0 and p.error is None for p in tmd.partitions.values()):
            count = len(tmd.partitions)
            if opts.partitions and count != opts.partitions and not created:
                note(f"topic '{opts.topic}' exists with {count} partitions (not {opts.partitions}); using it as is",
                     opts)
            return count
        if time.monotonic() > deadline:
            why = kafka_error_message(err) if err is not None else "partitions without a leader"
            raise Failure(f"topic '{opts.topic}' is not ready: {why}")
        time.sleep(0.1)


def make_payload(size: int, seed: int = 0x5EED) -> bytes:
    """One record value: random upper-case letters, as kafka-producer-perf-test sends by default."""
    rng = random.Random(seed)
    return bytes(rng.choices(range(ord("A"), ord("Z") + 1), k=size))


def note(message: str, opts: BenchOptions | None = None) -> None:
    """A status line on stderr; quiet when JSON is asked for (``progress`` off) unless stderr is a tty."""
    if opts is not None and not opts.progress and not sys.stderr.isatty():
        return
    Console(stderr=True, highlight=False).print(message, markup=False)


def progress_enabled(requested: bool) -> bool:
    return requested and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


class LiveProgress:
    """A rich progress bar on stderr, refreshed by the workload loop (no refresh thread), or nothing."""

    def __init__(self, enabled: bool, total: int, description: str) -> None:
        self._progress: Progress | None = None
        self._task: Any = None
        self._last = 0.0
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                console=Console(stderr=True), auto_refresh=False, transient=False,
            )
            self._task = self._progress.add_task(description, total=total or None, rate="")

    def __enter__(self) -> LiveProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()

    def update(self, completed: int, rate: str = "", force: bool = False, description: str | None = None) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        kw: dict[str, Any] = {"completed": completed, "rate": rate}
        if description is not None:
            kw["description"] = description
        self._progress.update(self._task, **kw)
        self._progress.refresh()
