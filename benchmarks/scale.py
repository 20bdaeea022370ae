#!/usr/bin/env python3
"""What a broker costs at scale when nothing happens: idle CPU with one consumer assigned to every
partition of a large topic (issue 28).

Each repetition starts a fresh broker from each source tree given (``--tree``; the first is "A",
e.g. this tree, the second "B", e.g. main checked out elsewhere), alternating A B A B, creates one
topic of ``--partitions`` partitions (beyond 10,000, topics of 10,000 each, as every command does),
starts one consumer assigned to all of them from offset 0 with the client's default fetch settings
(librdkafka through confluent-kafka, or kafka-python with ``--client kafka-python``), waits until
the client reports every partition as fetching (librdkafka's statistics: fetch_state "active";
kafka-python: its first empty poll), and then reads the broker's CPU time (/proc/<pid>/stat, user +
system) over ``--seconds`` with nothing produced. Printed: the broker's CPU as a share of one core,
per tree, median (min-max), and the ratio A/B per pair.

    .venv/bin/python benchmarks/scale.py idle --partitions 10000 -n 3 \\
        --tree src --tree /tmp/main/src          # this tree against main (git worktree or archive)
    .venv/bin/python benchmarks/scale.py idle --partitions 1000,3000,10000 -n 1 --tree src

One broker's big operations (each with ``--tree`` A B alternating, like ``idle``):

    create       CreateTopics of one topic of --partitions partitions; Metadata of all of them; one
                 record produced to every partition, then read back; the broker's peak RSS
    restart      a topic of --partitions partitions with one record each; clean stop (SIGTERM to
                 exit); clean start: ready, then a Fetch served; --unflushed partitions get one more
                 record each, then SIGKILL; start again: ready, then a Fetch served; every record
                 read back
    stop         SIGTERM to exit with --partitions partitions (each with a record)
    connections  --connections sockets at once, each served ApiVersions and Metadata; peak RSS;
                 the broker's open file descriptors before, with all open, and after they close

    .venv/bin/python benchmarks/scale.py restart --partitions 11000 --tree src --tree /tmp/scale-main/src
    .venv/bin/python benchmarks/scale.py connections --connections 200,1000,2000 --tree src

Each run's data directory is deleted when the benchmark ends, not when the run ends
(``--delete-between`` deletes it at once). On ext4 without a journal (these machines) a new inode
skips every inode freed in its block group within the last 60 s (360 s while that inode's table
block is not yet written back), checking each one: after a run's 30,000 files are deleted the next
run's CreateTopics spent up to 0.6 ms of kernel time per file it made (20-40 us otherwise), and
measured the deletion, not the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
READY_MARK = "ready: listening on"

sys.path.insert(0, str(Path(__file__).resolve().parent))  # compare.py's helpers
from compare import cpu_seconds, free_port, log, proc_status_bytes  # noqa: E402

_SCRATCH: list[str] = []  # data directories to delete at the end
DELETE_BETWEEN = False  # --delete-between


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    """A run's data directory; deleted at the end of the benchmark (module docstring says why)."""
    tmp = tempfile.mkdtemp(prefix="strom-scale-")
    try:
        yield tmp
    finally:
        if DELETE_BETWEEN:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            _SCRATCH.append(tmp)


@atexit.register
def _delete_scratch() -> None:
    for tmp in _SCRATCH:
        shutil.rmtree(tmp, ignore_errors=True)


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
topics, client = json.loads(sys.argv[1]), sys.argv[2]  # [[topic, partitions], ...]
bootstrap = sys.argv[3]
total = sum(n for _, n in topics)
threading.Thread(target=lambda: (sys.stdin.read(), __import__("os")._exit(0)), daemon=True).start()
if client == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    ready = False
    def stats(s):
        global ready
        if ready:
            return
        d = json.loads(s)
        active = sum(1 for t, _ in topics
                     for k, p in d.get("topics", {}).get(t, {}).get("partitions", {}).items()
                     if k != "-1" and p.get("fetch_state") == "active")
        if active == total:
            ready = True
            print("ready", flush=True)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-bench", "enable.auto.commit": False,
                  "statistics.interval.ms": 500, "stats_cb": stats})
    c.assign([TopicPartition(t, p, 0) for t, n in topics for p in range(n)])
    while True:
        m = c.poll(0.5)
        if m is not None and not m.error():
            print("unexpected record", flush=True)
else:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(t, p) for t, n in topics for p in range(n)]
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
    with scratch() as tmp:
        broker, bootstrap = start_broker(src, Path(tmp) / "logs", extra)
        try:
            topics = topics_of(partitions)
            created = sum(create_topic(bootstrap, t, n) for t, n in topics)
            consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, json.dumps(topics), client, bootstrap],
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


# ---- one broker's big operations ------------------------------------------------------------------


class BrokerProcess:
    """A broker of one source tree over a data directory that outlives it (restarts reuse it)."""

    def __init__(self, src: Path, data: Path, extra: list[str], profile: Path | None = None) -> None:
        self.src, self.data, self.extra, self.profile = src, data, extra, profile
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self.spawned = 0.0
        self.peak_rss = 0
        self._spy: subprocess.Popen[bytes] | None = None

    def spawn(self, what: str = "run") -> None:
        cmd = [sys.executable, "-m", "strom.cli.main", "broker",
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}", "--override", f"log.dirs={self.data}",
               "--override", "admin.listeners="]
        for kv in self.extra:
            cmd += ["--override", kv]
        env = {**os.environ, "PYTHONPATH": str(self.src.resolve()), "PYTHONUNBUFFERED": "1"}
        self.spawned = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=self.data.parent, env=env)
        if self.profile is not None:  # py-spy from the first moment: start-up included
            self.profile.mkdir(parents=True, exist_ok=True)
            out = self.profile / f"{what}-{self.src.resolve().parent.name}-{int(time.time())}.txt"
            self._spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                                          str(self.proc.pid), "-r", "100", "-f", "raw", "-o", str(out)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self) -> float:
        """Seconds from spawn until the broker says it is ready."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if READY_MARK in line:
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep the pipe drained
                return time.monotonic() - self.spawned
        raise RuntimeError(f"the broker from {self.src} did not start")

    def start(self, what: str = "run") -> float:
        self.spawn(what)
        return self.wait_ready()

    def rss(self) -> int:
        """Resident set size now, in bytes; the peak seen is kept."""
        assert self.proc is not None
        value = proc_status_bytes(self.proc.pid, "VmRSS") or 0
        self.peak_rss = max(self.peak_rss, value)
        return value

    def hwm(self) -> int:
        """The kernel's peak RSS of the process (VmHWM), in bytes."""
        assert self.proc is not None
        return proc_status_bytes(self.proc.pid, "VmHWM") or 0

    def fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> float:
        """SIGTERM; seconds until the process has exited."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("the broker did not stop within 120 s of SIGTERM") from None
        took = time.monotonic() - t0
        self._end_spy()
        if self.proc.returncode != 0:
            raise RuntimeError(f"the broker exited with {self.proc.returncode} after SIGTERM")
        return took

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self._end_spy()

    def _end_spy(self) -> None:
        if self._spy is not None:
            self._spy.wait(60)  # py-spy writes its file once the process is gone
            self._spy = None


def produce_one_each(bootstrap: str, topic: str, partitions: range, value: bytes) -> float:
    """One record to each partition, acks=all; seconds until every one is acknowledged."""
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 120_000})
    t0 = time.monotonic()
    for p in partitions:
        producer.produce(topic, value, partition=p,
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce failed: {len(failed)} errors, first {failed[:1]}")
    return time.monotonic() - t0


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 180.0) -> float:
    """Seconds to read ``expected`` records from every partition from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench", "enable.auto.commit": False})
    t0 = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        while got < expected:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"read {got} of {expected} records in {timeout:.0f} s")
            for m in consumer.consume(10_000, 1.0):
                if m.error() is None:
                    got += 1
        if got != expected:
            raise RuntimeError(f"read {got} records, {expected} expected")
        return time.monotonic() - t0
    finally:
        consumer.close()


def first_fetch(broker: BrokerProcess, topic: str, partition: int, timeout: float = 120.0) -> float:
    """Seconds from the broker's spawn until a Fetch of ``partition`` returned its first record
    (the client retries while the broker is not listening yet)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scale-bench",
                         "enable.auto.commit": False, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 200, "retry.backoff.ms": 20,
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = consumer.poll(0.05)
            if m is not None and m.error() is None:
                return time.monotonic() - broker.spawned
        raise RuntimeError(f"no record from {topic}-{partition} within {timeout:.0f} s")
    finally:
        consumer.close()


def metadata_all(bootstrap: str, topic: str, partitions: int) -> float:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)  # connected: the timing below is the one request
    t0 = time.monotonic()
    md = admin.list_topics(topic, timeout=30)
    took = time.monotonic() - t0
    got = md.topics[topic].partitions
    if len(got) != partitions or any(p.leader < 0 for p in got.values()):
        raise RuntimeError(f"Metadata: {len(got)} partitions of {partitions}, or leaderless ones")
    return took


def create_once(src: Path, partitions: int, extra: list[str], profile: Path | None) -> dict[str, float]:
    """Beyond MAX_PER_TOPIC partitions, several topics (``topics_of``): each figure is their sum."""
    topics = topics_of(partitions)
    r: dict[str, float] = {}
    with scratch() as tmp:
        broker = BrokerProcess(src, Path(tmp) / "logs", extra, profile)
        broker.start("create")
        try:
            rss0 = broker.rss()
            r["create_s"] = sum(create_topic(broker.bootstrap, t, n) for t, n in topics)
            r["metadata_s"] = sum(metadata_all(broker.bootstrap, t, n) for t, n in topics)
            r["produce_s"] = sum(produce_one_each(broker.bootstrap, t, range(n), b"x") for t, n in topics)
            r["read_s"] = sum(read_all(broker.bootstrap, t, n, n) for t, n in topics)
            broker.rss()
            r["rss_start_mb"] = rss0 / 2**20
            r["rss_peak_mb"] = broker.hwm() / 2**20
        finally:
            r["stop_s"] = broker.stop()
        return r


MAX_PER_TOPIC = 10_000  # strom's cap on partitions one request may create (as a policy)


def topics_of(partitions: int, prefix: str = "scale") -> list[tuple[str, int]]:
    """Topics ``<prefix>0``, ``<prefix>1``, ... of at most MAX_PER_TOPIC partitions,
    ``partitions`` in all."""
    return [(f"{prefix}{i}", min(MAX_PER_TOPIC, partitions - start))
            for i, start in enumerate(range(0, partitions, MAX_PER_TOPIC))]


def restart_once(src: Path, partitions: int, unflushed: int, extra: list[str],
                 profile: Path | None) -> dict[str, float]:
    topics = topics_of(partitions)
    last_topic, last_count = topics[-1]
    with scratch() as tmp:
        broker = BrokerProcess(src, Path(tmp) / "logs", extra, profile)
        broker.start("first")
        r: dict[str, float] = {}
        try:
            r["create_s"] = sum(create_topic(broker.bootstrap, t, n) for t, n in topics)
            for t, n in topics:
                produce_one_each(broker.bootstrap, t, range(n), b"x")
            r["rss_mb"] = broker.hwm() / 2**20
        finally:
            r["stop_s"] = broker.stop()
        r["clean_ready_s"] = broker.start("clean-start")
        r["clean_fetch_s"] = first_fetch(broker, last_topic, last_count - 1)
        first_topic, first_count = topics[0]
        step = max(first_count // max(unflushed, 1), 1)
        touched = range(0, first_count, step)[:unflushed]
        produce_one_each(broker.bootstrap, first_topic, touched, b"y")  # unflushed: the page cache only
        broker.kill()
        r["unclean_ready_s"] = broker.start("unclean-start")
        r["unclean_fetch_s"] = first_fetch(broker, last_topic, last_count - 1)
        try:
            for t, n in topics:
                read_all(broker.bootstrap, t, n, n + (len(touched) if t == first_topic else 0))
        finally:
            r["stop_after_s"] = broker.stop()
        return r


def stop_once(src: Path, partitions: int, extra: list[str], profile: Path | None) -> dict[str, float]:
    with scratch() as tmp:
        broker = BrokerProcess(src, Path(tmp) / "logs", extra, profile)
        broker.start("stop")
        try:
            for t, n in topics_of(partitions):
                create_topic(broker.bootstrap, t, n)
                produce_one_each(broker.bootstrap, t, range(n), b"x")
        finally:
            took = broker.stop()
        return {"stop_s": took}


def _api_versions_v0(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 5) + b"scale"
    return struct.pack(">i", len(body)) + body


def _metadata_v1_no_topics(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 3, 1, correlation_id, 5) + b"scale" + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


async def _hold_connections(host: str, port: int, count: int, sample: Callable[[], None]) -> tuple[int, list[Any]]:
    """Open ``count`` connections, each asks ApiVersions then Metadata and must be answered;
    returns (served, writers) with every connection still open."""

    async def one(i: int) -> tuple[bool, Any]:
        for _attempt in range(50):  # a full listen queue refuses for a moment
            try:
                reader, writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            return False, None
        ok = True
        for corr, frame in ((1, _api_versions_v0(1)), (2, _metadata_v1_no_topics(2))):
            writer.write(frame)
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 60))[0]
            payload = await asyncio.wait_for(reader.readexactly(size), 60)
            ok = ok and struct.unpack_from(">i", payload)[0] == corr
        return ok, writer

    async def sampler() -> None:
        while True:
            sample()
            await asyncio.sleep(0.05)

    task = asyncio.ensure_future(sampler())
    try:
        results = await asyncio.gather(*(one(i) for i in range(count)))
        sample()
    finally:
        task.cancel()
    return sum(ok for ok, _ in results), [w for _, w in results if w is not None]


def connections_once(src: Path, count: int, partitions: int, extra: list[str]) -> dict[str, float]:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
    with scratch() as tmp:
        broker = BrokerProcess(src, Path(tmp) / "logs", extra)
        broker.start("connections")
        try:
            if partitions:
                create_topic(broker.bootstrap, "scale", partitions)
            fds_before = broker.fds()
            rss_before = broker.rss()
            broker.peak_rss = 0

            async def run() -> tuple[int, int, float]:
                t0 = time.monotonic()
                served, writers = await _hold_connections("127.0.0.1", broker.port, count, broker.rss)
                took = time.monotonic() - t0
                fds_open = broker.fds()
                for w in writers:
                    w.close()
                await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
                return served, fds_open, took

            served, fds_open, took = asyncio.run(run())
            deadline = time.monotonic() + 30
            while broker.fds() > fds_before and time.monotonic() < deadline:
                time.sleep(0.1)
            return {"served": served, "connect_s": took, "rss_before_mb": rss_before / 2**20,
                    "rss_peak_mb": broker.peak_rss / 2**20, "fds_before": fds_before, "fds_open": fds_open,
                    "fds_after": broker.fds()}
        finally:
            broker.stop()


def machine_load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def cmd_operation(args: argparse.Namespace) -> None:
    """create / restart / stop / connections: per count, A B A B..., then medians and A/B ratios."""
    trees = [Path(t) for t in (args.tree or [str(ROOT / "src")])]
    extra = args.override or []
    counts = [int(x) for x in (args.connections if args.cmd == "connections" else args.partitions).split(",")]
    results: dict[int, dict[str, list[dict[str, float]]]] = {}
    for count in counts:
        per = results.setdefault(count, {str(t): [] for t in trees})
        for rep in range(args.repetitions):
            for t in trees:
                before = machine_load()
                if args.cmd == "create":
                    r = create_once(t, count, extra, args.profile)
                elif args.cmd == "restart":
                    r = restart_once(t, count, min(args.unflushed, count), extra, args.profile)
                elif args.cmd == "stop":
                    r = stop_once(t, count, extra, args.profile)
                else:
                    r = connections_once(t, count, args.partitions_for_connections, extra)
                per[str(t)].append(r)
                log(f"{args.cmd} {count}, {t}, run {rep + 1} ({before}; after: {machine_load()}): "
                    + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{args.cmd}: median (min-max) of {args.repetitions} runs per tree; {machine_load()} at the end")
    for count, per in results.items():
        for key in next(iter(per.values()))[0]:
            cols = [spread([float(r[key]) for r in runs]) for runs in per.values()]
            line = f"{count:>7} {key:>16}: " + " | ".join(f"{t}: {c}" for t, c in zip(per, cols, strict=True))
            if len(trees) == 2:
                a, b = per.values()
                ratios = [x[key] / y[key] for x, y in zip(a, b, strict=True) if y[key] > 0]
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
    for name, help_ in (("create", "CreateTopics, Metadata, one record produced to each partition and read back"),
                        ("restart", "clean stop, clean start, SIGKILL with unflushed records, start again"),
                        ("stop", "SIGTERM to exit"),
                        ("connections", "many connections at once: all served, RSS, file descriptors")):
        op = sub.add_parser(name, help=help_)
        op.add_argument("--partitions", default="1000" if name == "connections" else "10000",
                        help="comma-separated partition counts" if name != "connections" else argparse.SUPPRESS)
        if name == "connections":
            op.add_argument("--connections", default="200,1000,2000", help="comma-separated connection counts")
            op.add_argument("--topic-partitions", dest="partitions_for_connections", type=int, default=0,
                            help="a topic of this many partitions exists meanwhile")
        if name == "restart":
            op.add_argument("--unflushed", type=int, default=1000,
                            help="partitions given one more record (not flushed) before the SIGKILL")
        op.add_argument("-n", "--repetitions", type=int, default=1)
        op.add_argument("--tree", action="append", help="a source tree's src directory (repeat: A, B)")
        op.add_argument("--override", "-o", action="append", help="broker setting key=value")
        op.add_argument("--json", action="store_true")
        op.add_argument("--profile", type=Path, help="py-spy each broker into this directory (raw stacks)")
    for p in sub.choices.values():
        p.add_argument("--delete-between", action="store_true",
                       help="delete each run's data when the run ends, not at the end")
    args = ap.parse_args()
    global DELETE_BETWEEN
    DELETE_BETWEEN = args.delete_between
    if args.cmd == "idle":
        cmd_idle(args)
    else:
        cmd_operation(args)


if __name__ == "__main__":
    main()
