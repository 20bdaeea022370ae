"""The strom source and sink on a Spark standalone cluster (a master and two workers, executors in
their own JVMs, Python workers importing strom there): an availableNow query from topic to topic,
killed mid-way, then restarted from its checkpoint after more input arrived; a read_committed reader of the output finds every input record exactly once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import batches, create_topic, kill_group, produce, read_committed, start_job

PARTITIONS = 4  # more tasks per micro-batch than one executor's core: both executors read
PER_TRIGGER = 100


def _produce(b: str, topic: str, start: int, n: int) -> list[Any]:
    out = produce(b, [{"topic": topic, "value": f"v{i}".encode(), "partition": i % PARTITIONS}
                      for i in range(start, start + n)])
    assert len(out) == n
    return out


def _run_to_end(args: list[str], log: Path, timeout: float = 120) -> float:
    t0 = time.monotonic()
    proc = start_job(args, log, SPARK_LOCAL_IP="127.0.0.1")
    try:
        assert proc.wait(timeout) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)
    return time.monotonic() - t0


@pytest.mark.timeout(240)
def test_available_now_restarts_exactly_once_on_a_cluster(spark_cluster: Any, module_broker: Any,
                                                          tmp_path: Path) -> None:
    b = module_broker.bootstrap
    create_topic(b, "cl-in", PARTITIONS)
    create_topic(b, "cl-out", 2)
    produced = _produce(b, "cl-in", 0, 1200)
    ck, log = tmp_path / "ck", tmp_path / "job.log"
    args = [b, "cl-in", "topic:cl-out", str(ck)]

    # Run 1: availableNow in micro-batches of 100, SIGKILLed (driver and its JVM) while a batch is
    # planned but not committed. The executors stay: the master removes the dead application.
    t0 = time.monotonic()
    proc = start_job([*args, "available-now", str(PER_TRIGGER), spark_cluster.master_url], log,
                     SPARK_LOCAL_IP="127.0.0.1")
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            assert proc.poll() is None, "run 1 ended before it was killed:\n" + log.read_text()[-3000:]
            planned, done = batches(ck, "offsets"), batches(ck, "commits")
            if len(done) >= 2 and max(planned) > max(done):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("run 1 made no progress:\n" + log.read_text()[-3000:])
    finally:
        kill_group(proc)
    killed_after = len(batches(ck, "commits"))
    assert killed_after * PER_TRIGGER < 1200
    first = time.monotonic() - t0

    # Run 2: more input, then availableNow from the same checkpoint: the batch in flight is
    # replayed with its logged offsets, then everything up to the latest offsets at its start.
    produced += _produce(b, "cl-in", 1200, 600)
    second = _run_to_end([*args, "available-now", "1000", spark_cluster.master_url], log)
    print(f"run 1 killed after {killed_after} batches, {first:.1f}s; run 2 {second:.1f}s")

    got = read_committed(b, "cl-out", 2)
    want = sorted((f"{p.partition}:{p.offset}".encode(), p.value) for p in produced)
    assert len(got) == len(want), f"{len(got)} records for {len(want)} inputs"  # none twice ...
    assert sorted(got) == want  # ... none lost

    # The source's tasks ran in executors on both workers (two applications, an executor each).
    finished = {path.parent.parent.parent.name for path in spark_cluster.executor_logs()
                if "Finished task" in path.read_text(errors="replace")}
    assert finished == {"work-0", "work-1"}, spark_cluster.logs(10)
