"""Exactly once under crashes: a consume-transform-produce worker (confluent-kafka, offsets sent
with the transaction) SIGKILLed at random points, and the broker SIGKILLed under it; then each
input's transform is in the output exactly once for read_committed readers. And a broker SIGKILLed
with transactions committed, aborted and open restarts consistent, with nothing open forever."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from brokerproc import die_with_parent_hook
from confluent_kafka import Producer
from helpers import create_topics, wait_until
from txn_helpers import TXN_BROKER, confluent_values, kafka_python_end_offsets, txn_producer

from strom.coordinator.txn_records import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.records.batch import iter_batches
from strom.records.codec import build_batch, read_all
from strom.storage.log import LogConfig, PartitionLog

WORKER = Path(__file__).with_name("eos_worker.py")
PARTITIONS = 2


class Worker:
    def __init__(self, bootstrap: str, source: str, sink: str, txn_id: str, group: str, pause_s: float = 0.1) -> None:
        # ``pause_s`` inside each transaction of 10 records: 400 inputs take the worker some 5 s, so
        # kills a second or two apart land in the middle of its work, mostly inside a transaction.
        self.args = [sys.executable, str(WORKER), bootstrap, source, sink, str(PARTITIONS), txn_id, group,
                     str(pause_s)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                     preexec_fn=die_with_parent_hook())

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def worker_factory() -> Iterator[list[Worker]]:
    workers: list[Worker] = []
    yield workers
    for w in workers:
        w.kill()


def _produce_inputs(bootstrap: str, topic: str, n: int) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=b"%05d" % i, partition=i % PARTITIONS)
    assert producer.flush(20) == 0
    return {b"out-%05d" % i for i in range(n)}


def _check_exactly_once(bootstrap: str, sink: str, expected: set[bytes], require_aborts: bool = False) -> None:
    if require_aborts:
        written = confluent_values(bootstrap, sink, PARTITIONS, "read_uncommitted", quiet_s=1.0)
        # Kills left aborted transforms in the log: read_uncommitted sees them, read_committed must not.
        assert len(written) > len(expected), "no transaction was cut short: the test exercised nothing"
    got = confluent_values(bootstrap, sink, PARTITIONS, "read_committed", expect=len(expected), timeout_s=30)
    extra = confluent_values(bootstrap, sink, PARTITIONS, "read_committed", quiet_s=1.0)  # nothing more arrives
    counts = Counter(extra)
    dupes = {v: c for v, c in counts.items() if c > 1}
    assert not dupes, f"duplicates: {list(dupes.items())[:5]}"
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))[:5]}, extra {sorted(set(counts) - expected)[:5]}"
    assert len(got) == len(expected)


def _start(broker_factory, worker_factory: list[Worker], name: str, inputs: int) -> tuple[Any, Worker, set[bytes]]:
    """A broker, ``inputs`` records in ``<name>-in`` and a worker (not started) writing ``<name>-out``."""
    broker = broker_factory(overrides=TXN_BROKER)
    create_topics(broker.bootstrap, {f"{name}-in": PARTITIONS, f"{name}-out": PARTITIONS})
    expected = _produce_inputs(broker.bootstrap, f"{name}-in", inputs)
    worker = Worker(broker.bootstrap, f"{name}-in", f"{name}-out", f"{name}-worker", f"{name}-group")
    worker_factory.append(worker)
    return broker, worker, expected


def _wait_all_transformed(bootstrap: str, sink: str, expected: set[bytes], worker: Worker, timeout_s: float) -> None:
    """Until every input's transform is readable (restarting the worker whenever it exits)."""
    def done() -> bool:
        worker.ensure_running()
        return len(set(confluent_values(bootstrap, sink, PARTITIONS, "read_committed", quiet_s=0.5))) == len(expected)
    wait_until(done, timeout_s, interval=1.0, what="every input transformed")


@pytest.mark.timeout(180)
def test_worker_killed_at_random_points(broker_factory, worker_factory: list[Worker]) -> None:
    broker, worker, expected = _start(broker_factory, worker_factory, "eos", 400)
    bs = broker.bootstrap
    rng = random.Random(12)
    for _ in range(5):
        worker.ensure_running()
        time.sleep(rng.uniform(1.0, 2.0))
        worker.kill()
    _wait_all_transformed(bs, "eos-out", expected, worker, 120)
    worker.kill()
    _check_exactly_once(bs, "eos-out", expected, require_aborts=True)


@pytest.mark.timeout(180)
def test_broker_killed_under_worker(broker_factory, worker_factory: list[Worker]) -> None:
    broker, worker, expected = _start(broker_factory, worker_factory, "killed", 300)
    bs = broker.bootstrap
    rng = random.Random(7)
    progress = []
    for _ in range(3):
        worker.ensure_running()
        time.sleep(rng.uniform(1.0, 2.5))
        progress.append(sum(kafka_python_end_offsets(bs, "killed-out", PARTITIONS, "read_uncommitted").values()))
        broker.kill()
        broker.start()
    # At least one kill hit the stream midway (markers count in offsets, so compare loosely).
    assert any(0 < p < len(expected) for p in progress), progress
    _wait_all_transformed(bs, "killed-out", expected, worker, 120)
    worker.kill()
    _check_exactly_once(bs, "killed-out", expected)


@pytest.mark.timeout(120)
def test_broker_killed_with_transactions_in_every_state(broker_factory) -> None:
    broker = broker_factory(overrides=TXN_BROKER)
    bs = broker.bootstrap
    create_topics(bs, {"states": 1})
    committed = txn_producer(bs, "committer")
    committed.begin_transaction()
    committed.produce("states", value=b"committed")
    committed.commit_transaction(20)
    aborted = txn_producer(bs, "aborter")
    aborted.begin_transaction()
    aborted.produce("states", value=b"aborted")
    assert aborted.flush(10) == 0
    aborted.abort_transaction(20)
    left_open = txn_producer(bs, "opener", **{"transaction.timeout.ms": 2000})
    left_open.begin_transaction()
    left_open.produce("states", value=b"open")
    assert left_open.flush(10) == 0
    plain = Producer({"bootstrap.servers": bs})
    plain.produce("states", value=b"plain")
    assert plain.flush(10) == 0
    broker.kill()
    broker.start()
    # The open transaction is aborted by the restarted coordinator (its timeout passed), so the LSO
    # reaches the log end and the plain record after it becomes readable.
    wait_until(lambda: confluent_values(bs, "states", 1, "read_committed", quiet_s=0.5) == [b"committed", b"plain"],
               20, interval=0.5, what="the open transaction aborted after the restart")
    assert confluent_values(bs, "states", 1, "read_uncommitted") == [b"committed", b"aborted", b"open", b"plain"]
    # The restarted coordinator still knows the committed producer's epoch: a new transaction works.
    again = txn_producer(bs, "committer")
    again.begin_transaction()
    again.produce("states", value=b"second")
    again.commit_transaction(20)
    assert confluent_values(bs, "states", 1, "read_committed", expect=3) == [b"committed", b"plain", b"second"]


def _last_state(log_dir: Path, transactional_id: str) -> TxnLogValue:
    """The newest __transaction_state value of a transactional id, read from the stopped broker's files."""
    plog = PartitionLog.open(log_dir, "__transaction_state", 0, LogConfig())
    try:
        found = [decode_value(r.value) for r in read_all(plog.read(0, 1 << 20, max_offset=plog.log_end_offset))
                 if r.key is not None and r.value is not None and decode_key(r.key) == transactional_id]
        return found[-1]
    finally:
        plog.close()


@pytest.mark.timeout(60)
def test_crash_in_prepare_commit_completes_at_restart(broker_factory) -> None:
    """The broker died after writing PrepareCommit and before any marker: the restarted coordinator
    writes the markers and completes the commit."""
    broker = broker_factory(overrides=TXN_BROKER)
    bs = broker.bootstrap
    create_topics(bs, {"prep": 2})
    producer = txn_producer(bs, "preparer")
    producer.begin_transaction()
    for i in range(4):
        producer.produce("prep", value=b"p%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    broker.kill()
    # What the broker would have written next, had it lived: PrepareCommit (the markers never made it).
    state_dir = Path(broker.data_dir) / "__transaction_state-0"
    ongoing = _last_state(state_dir, "preparer")
    assert ongoing.state is TxnState.ONGOING and len(ongoing.partitions) == 2
    plog = PartitionLog.open(state_dir, "__transaction_state", 0, LogConfig())
    prepared = replace(ongoing, state=TxnState.PREPARE_COMMIT)
    buf = bytearray(build_batch([(encode_key("preparer"), encode_value(prepared))], timestamp_ms=int(time.time() * 1000)))
    plog.append(buf, iter_batches(buf), leader_epoch=0)
    plog.flush()
    plog.close()
    broker.start()
    values = confluent_values(bs, "prep", 2, "read_committed", expect=4)
    assert sorted(values) == [b"p0", b"p1", b"p2", b"p3"]
    broker.stop()
    assert _last_state(state_dir, "preparer").state is TxnState.COMPLETE_COMMIT
