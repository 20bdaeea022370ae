#!/usr/bin/env python3
"""What a broker costs at scale when nothing happens: idle CPU with one consumer assigned to every
partition of a large topic (issue 28).

Each repetition starts a fresh broker from each source tree given (``--tree``; the first is "A",
e.g. this tree, the second "B", e.g. main checked out elsewhere), alternating A B A B, creates one
topic of ``--partitions`` partitions, starts one consumer assigned to all of them from offset 0 with
the client's default fetch settings (librdkafka through confluent-kafka, or kafka-python with
``--client kafka-python``), waits until the client reports every partition as fetching (librdkafka's
statistics: fetch_state "active"; kafka-python: its first empty poll), and then reads the broker's
CPU time (/proc/<pid>/stat, user + system) over ``--seconds`` with nothing produced. Printed: the
broker's CPU as a share of one core, per tree, median (min-max), and the ratio A/B per pair.

    .venv/bin/python benchmarks/scale.py idle --partitions 10000 -n 3 \\
        --tree src --tree /tmp/main/src          # this tree against main (git worktree or archive)
    .venv/bin/python benchmarks/scale.py idle --partitions 1000,3000,10000 -n 1 --tree src
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_MARK = "ready: listening on"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start_broker(src: Path, data: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "strom.cli.main", "broker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
           "--override", "admin.listeners="]
    for kv in extra:
        cmd += ["--override", kv]
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=data.parent,
                            env=env)
    out = proc.stdout
    assert out is not None
    for line in out:
        if READY_MARK in line:
            threading.Thread(target=out.read, daemon=True).start()  # keep the pipe drained
            return proc, f"127.0.0.1:{port}"
    proc.kill()
    raise RuntimeError(f"the broker from {src} did not start")


def create_topic(bootstrap: str, topic: str, partitions: int) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    fut = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=300, operation_timeout=300)[topic]
    fut.result(timeout=300)
    return time.monotonic() - t0


# The consumer runs in its own process (its CPU is not the broker's); it prints "ready" once every
# partition is being fetched and then keeps polling until stdin closes.
CONSUMER = r"""
import json, sys, threading
topic, partitions, client = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bootstrap = sys.argv[4]
threading.Thread(target=lambda: (sys.stdin.read(), __import__("os")._exit(0)), daemon=True).start()
if client == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    ready = False
    def stats(s):
        global ready
        if ready:
            return
        d = json.loads(s)
        parts = d.get("topics", {}).get(topic, {}).get("partitions", {})
        active = sum(1 for k, p in parts.items() if k != "-1" and p.get("fetch_state") == "active")
        if active == partitions:
            ready = True
            print("ready", flush=True)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-bench", "enable.auto.commit": False,
                  "statistics.interval.ms": 500, "stats_cb": stats})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while True:
        m = c.poll(0.5)
        if m is not None and not m.error():
            print("unexpected record", flush=True)
else:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    c.poll(timeout_ms=1000)
    print("ready", flush=True)
    while True:
        c.poll(timeout_ms=500)
"""


def idle_once(src: Path, partitions: int, seconds: float, client: str, extra: list[str],
              profile: Path | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="strom-scale-") as tmp:
        broker, bootstrap = start_broker(src, Path(tmp) / "logs", extra)
        try:
            created = create_topic(bootstrap, "idle", partitions)
            consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, "idle", str(partitions), client, bootstrap],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                t0 = time.monotonic()
                assert consumer.stdout is not None
                line = consumer.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"the consumer did not get ready: {line!r}")
                ready_s = time.monotonic() - t0
                time.sleep(1.0)  # past the first fetches' answers
                cpu0, w0 = cpu_seconds(broker.pid), time.monotonic()
                spy = None
                if profile is not None:  # py-spy (.venv/bin/pip install -e '.[bench]') over the interval
                    profile.mkdir(parents=True, exist_ok=True)
                    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(broker.pid), "-r", "200", "-d",
                                            str(int(seconds)), "-f", "raw", "-o",
                                            str(profile / f"idle-{partitions}-{int(time.time())}.txt")],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(seconds)
                if spy is not None:
                    spy.wait(30)
                cpu = cpu_seconds(broker.pid) - cpu0
                wall = time.monotonic() - w0
            finally:
                assert consumer.stdin is not None
                consumer.stdin.close()
                consumer.wait(10)
            return {"create_s": created, "ready_s": ready_s, "cpu_s": cpu, "wall_s": wall,
                    "core_pct": 100 * cpu / wall}
        finally:
            broker.terminate()
            try:
                broker.wait(60)
            except subprocess.TimeoutExpired:
                broker.kill()


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def cmd_idle(args: argparse.Namespace) -> None:
    trees = [Path(t) for t in (args.tree or [str(ROOT / "src")])]
    results: dict[int, dict[str, list[dict[str, float]]]] = {}
    for partitions in (int(x) for x in args.partitions.split(",")):
        per = results.setdefault(partitions, {str(t): [] for t in trees})
        for rep in range(args.repetitions):
            for t in trees:
                r = idle_once(t, partitions, args.seconds, args.client, args.override or [], args.profile)
                per[str(t)].append(r)
                log(f"{partitions} partitions, {t}, run {rep + 1}: {r['core_pct']:.2f}% of a core "
                    f"(CPU {r['cpu_s']:.2f} s in {r['wall_s']:.1f} s; topic created in {r['create_s']:.1f} s, "
                    f"consumer fetching all after {r['ready_s']:.1f} s)")
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"idle broker CPU, % of one core, one {args.client} consumer, {args.seconds:.0f} s per run, "
          f"median (min-max)")
    for partitions, per in results.items():
        cols = [spread([r["core_pct"] for r in runs]) for runs in per.values()]
        line = f"{partitions:>7} partitions: " + " | ".join(f"{t}: {c}" for t, c in zip(per, cols, strict=True))
        if len(trees) == 2:
            a, b = per.values()
            ratios = [x["core_pct"] / y["core_pct"] for x, y in zip(a, b, strict=True) if y["core_pct"] > 0]
            if ratios:
                line += f" | A/B {spread(ratios)}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    idle = sub.add_parser("idle", help="broker CPU with one consumer on every partition and nothing to read")
    idle.add_argument("--partitions", default="10000", help="comma-separated partition counts")
    idle.add_argument("-n", "--repetitions", type=int, default=3)
    idle.add_argument("--seconds", type=float, default=20.0, help="measured interval per run")
    idle.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    idle.add_argument("--tree", action="append", help="a source tree's src directory (repeat: A, B)")
    idle.add_argument("--override", "-o", action="append", help="broker setting key=value")
    idle.add_argument("--json", action="store_true")
    idle.add_argument("--profile", type=Path, help="py-spy each broker into this directory (raw stacks)")
    args = ap.parse_args()
    if args.cmd == "idle":
        cmd_idle(args)


if __name__ == "__main__":
    main()
