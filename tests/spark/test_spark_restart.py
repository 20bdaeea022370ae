"""Kill the Spark driver mid-stream (SIGKILL to its process group: Python driver and JVM), restart the
query with the same checkpoint: the file sink holds every record exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topic, produce

JOB = Path(__file__).parent / "stream_job.py"
RECORDS = 3000
PER_TRIGGER = 100


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as f:
        return subprocess.Popen([sys.executable, str(JOB), *args], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _batches(ck: Path, kind: str) -> set[int]:
    d = ck / kind
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
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


@pytest.mark.timeout(300)
def test_kill_driver_mid_stream_then_resume_exactly_once(spark: Any, module_broker: Any, tmp_path: Path) -> None:
    b = module_broker.bootstrap
    create_topic(b, "resume", 3)
    produced = produce(b, [{"topic": "resume", "key": f"k{i % 17}".encode(), "value": f"v{i}".encode(),
                            "partition": i % 3} for i in range(RECORDS)])
    assert len(produced) == RECORDS
    out, ck, log = tmp_path / "out", tmp_path / "ck", tmp_path / "job.log"
    args = [b, "resume", str(out), str(ck)]

    proc = _start([*args, "continuous", str(PER_TRIGGER)], log)
    killed_mid_batch = False
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            planned, done = _batches(ck, "offsets"), _batches(ck, "commits")
            # Kill once a few batches are committed, preferably while the next is planned but not committed.
            if len(done) >= 3 and max(planned) > max(done):
                killed_mid_batch = True
                break
            if len(done) >= 8:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the streaming job made no progress:\n" + log.read_text()[-3000:])
    finally:
        _kill_group(proc)
    committed = _batches(ck, "commits")
    assert len(committed) * PER_TRIGGER < RECORDS, "the job finished before it was killed"
    print(f"killed after {len(committed)} committed batches, {time.monotonic() - t0:.1f}s; mid-batch: {killed_mid_batch}")

    # Resume: the batch that was in flight is replayed with its logged offsets, the rest in bigger batches.
    t0 = time.monotonic()
    proc = _start([*args, "available-now", str(PER_TRIGGER * 10)], log)
    try:
        assert proc.wait(200) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    print(f"resumed run took {time.monotonic() - t0:.1f}s")

    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    want = sorted((p.partition, p.offset, p.value) for p in produced)
    assert len(got) == RECORDS  # no duplicates ...
    assert got == want          # ... and nothing lost
