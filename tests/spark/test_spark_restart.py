"""Kill the Spark driver mid-stream (SIGKILL to its process group: Python driver and JVM), restart the
query with the same checkpoint: the file sink holds every record exactly once, and so does a topic
written by the strom sink, read with read_committed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import batches, create_topic, kill_group, produce, read_committed, start_job

RECORDS = 3000
PER_TRIGGER = 100


def _kill_mid_stream_then_resume(b: str, topic: str, out: str, ck: Path, log: Path,
                                 written: Callable[[], int] | None = None) -> None:
    """Run the job until a few batches are committed, SIGKILL it (preferably with a batch planned
    but not committed; with ``written``, the rows the sink has written so far, once the batch in
    flight has written some), then finish what is left with availableNow from the same checkpoint."""
    args = [b, topic, out, str(ck)]
    proc = start_job([*args, "continuous", str(PER_TRIGGER)], log)
    killed_mid_batch = False
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            planned, done = batches(ck, "offsets"), batches(ck, "commits")
            # Kill once a few batches are committed, preferably while the next is planned but not committed.
            in_flight = len(done) >= 3 and max(planned) > max(done)
            if in_flight and (written is None or written() > len(done) * PER_TRIGGER):
                killed_mid_batch = True
                break
            if len(done) >= (8 if written is None else 25):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the streaming job made no progress:\n" + log.read_text()[-3000:])
    finally:
        kill_group(proc)
    committed = batches(ck, "commits")
    assert len(committed) * PER_TRIGGER < RECORDS, "the job finished before it was killed"
    print(f"killed after {len(committed)} committed batches, {time.monotonic() - t0:.1f}s; mid-batch: {killed_mid_batch}")

    # Resume: the batch that was in flight is replayed with its logged offsets, the rest in bigger batches.
    t0 = time.monotonic()
    proc = start_job([*args, "available-now", str(PER_TRIGGER * 10)], log)
    try:
        assert proc.wait(200) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)
    print(f"resumed run took {time.monotonic() - t0:.1f}s")


def _input(b: str, topic: str) -> list[Any]:
    create_topic(b, topic, 3)
    produced = produce(b, [{"topic": topic, "key": f"k{i % 17}".encode(), "value": f"v{i}".encode(),
                            "partition": i % 3} for i in range(RECORDS)])
    assert len(produced) == RECORDS
    return produced


@pytest.mark.timeout(300)
def test_kill_driver_mid_stream_then_resume_exactly_once(spark: Any, module_broker: Any, tmp_path: Path) -> None:
    b = module_broker.bootstrap
    produced = _input(b, "resume")
    out = tmp_path / "out"
    _kill_mid_stream_then_resume(b, "resume", str(out), tmp_path / "ck", tmp_path / "job.log")
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    want = sorted((p.partition, p.offset, p.value) for p in produced)
    assert len(got) == RECORDS  # no duplicates ...
    assert got == want          # ... and nothing lost


@pytest.mark.timeout(300)
def test_strom_sink_writes_each_record_once_through_a_driver_kill(module_broker: Any, tmp_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    b = module_broker.bootstrap
    produced = _input(b, "eos-in")
    create_topic(b, "eos-out", 2)
    # Rows the sink has written so far, committed or not (read_uncommitted): the job is killed after
    # the batch in flight wrote some, where an at-least-once sink would write them again.
    peek = Consumer({"bootstrap.servers": b, "group.id": f"eos-peek-{time.monotonic_ns()}",
                     "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    peek.assign([TopicPartition("eos-out", p, OFFSET_BEGINNING) for p in range(2)])
    seen = [0]

    def written() -> int:
        seen[0] += sum(1 for m in peek.consume(1000, 0.01) if m.error() is None)
        return seen[0]

    try:
        _kill_mid_stream_then_resume(b, "eos-in", "topic:eos-out", tmp_path / "ck", tmp_path / "job.log", written)
    finally:
        peek.close()
    got = read_committed(b, "eos-out", 2)
    want = sorted((f"{p.partition}:{p.offset}".encode(), p.value) for p in produced)
    assert len(got) == RECORDS, f"{len(got)} records for {RECORDS} inputs"  # none twice ...
    assert sorted(got) == want  # ... none lost
