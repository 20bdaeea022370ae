"""The strom source and sink on a Spark standalone cluster (a master and two workers, executors in
their own JVMs, Python workers importing strom there): an availableNow query from topic to topic,
killed mid-way, then restarted from its checkpoint after more input arrived, writes every input
record exactly once for read_committed readers; `strom demo trucking --master` runs there, and so
does the trucking job given to spark-submit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyspark
import pytest
from brokerproc import die_with_parent_hook, free_port
from spark_helpers import batches, create_topic, kill_group, produce, read_committed, start_job
from test_spark_trucking import MIN_VIOLATIONS, START_MS, expected_stats

from strom.demo.trucking import ALERTS_TOPIC, EVENTS_TOPIC, submit
from strom.demo.trucking.simulator import Simulator, produce_events

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


@pytest.mark.timeout(240)
def test_trucking_demo_on_the_cluster(spark_cluster: Any, registry_broker: Any, tmp_path: Path) -> None:
    """`strom demo trucking --master spark://...` runs the pipeline on the cluster: alerts are shown,
    Ctrl-C stops it cleanly with the summary, and nothing of Spark's start-up chatter is printed."""
    cmd = [sys.executable, "-m", "strom.cli.main", "demo", "trucking", "--master", spark_cluster.master_url,
           "--bootstrap-server", registry_broker.bootstrap, "--registry", registry_broker.registry_url,
           "--duration", "0", "--rate", "200", "--speedup", "30",
           "--output", str(tmp_path / "out"),
           "--spark-conf", "spark.executor.memory=512m",
           "--spark-conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
           "--spark-conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"]
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, preexec_fn=die_with_parent_hook())
    lines: list[str] = []
    alert = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("ALERT driver"):
                alert.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert alert.wait(180), "no alert shown:\n" + "\n".join(lines[-40:])
        proc.send_signal(signal.SIGINT)  # Ctrl-C: queries stopped between batches, then the summary
        assert proc.wait(60) == 0, "\n".join(lines[-40:])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        reader.join(10)
    out = "\n".join(lines)
    assert f"starting Spark ({spark_cluster.master_url}" in out
    assert "closed windows in" in out, out  # the summary table of the Parquet output
    for noise in ("WARN", "log4j", "NativeCodeLoader", "incubator", "rdkafka", "Traceback"):
        assert noise not in out, out
    # The demo's queries ran in executors on both workers.
    for worker in spark_cluster.workers:
        assert "for strom-trucking-demo" in worker.log.read_text(errors="replace"), spark_cluster.logs(10)


@pytest.mark.timeout(240)
def test_trucking_job_by_spark_submit(spark_cluster: Any, broker_factory: Any, tmp_path: Path) -> None:
    """The trucking job submitted with spark-submit to the cluster (as docs/spark.md shows) computes
    the alerts a plain-Python computation over the same seeded events gives."""
    broker = broker_factory(overrides={"schema.registry.listeners": f"http://127.0.0.1:{free_port()}"})
    b, url = broker.bootstrap, broker.registry_url
    create_topic(b, EVENTS_TOPIC, 3)
    create_topic(b, ALERTS_TOPIC, 1)
    events = Simulator(seed=7, trucks=6, start_ms=START_MS, mean_gap_ms=300).events(1200)
    produce_events(b, EVENTS_TOPIC, events, url)
    want = {k: v for k, v in expected_stats(events).items() if v["violations"] >= MIN_VIOLATIONS}
    assert want

    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    cmd = [str(spark_submit), "--master", spark_cluster.master_url,
           "--conf", "spark.executor.memory=512m", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
           "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
           submit.__file__, "--bootstrap-server", b, "--registry", url, "--output", str(tmp_path / "out"),
           "--starting-offsets", "earliest", "--available-now"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    log = tmp_path / "submit.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=die_with_parent_hook())
    try:
        assert proc.wait(200) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)

    records = read_committed(b, ALERTS_TOPIC, 1)
    got = {}
    for key, value in records:
        a = json.loads(value)
        assert key == str(a["driverId"]).encode()
        got[(a["windowStart"], a["driverId"])] = {k: a[k] for k in next(iter(want.values()))}
    assert len(records) == len(got)  # each alert once
    assert got == want
