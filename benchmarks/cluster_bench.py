#!/usr/bin/env python3
"""The cluster benchmarks of issue 11: replicated throughput, unavailability after a leader dies, and
follower lag. Everything runs on 127.0.0.1: Debian's ZooKeeper and strom brokers as child processes of
this script, stopped when it ends (also on Ctrl-C or SIGTERM).

    .venv/bin/python benchmarks/cluster_bench.py throughput -n 3     # RF=3 acks=all vs one broker acks=1
    .venv/bin/python benchmarks/cluster_bench.py throughput -n 1 --profile /tmp/prof   # py-spy every broker
    .venv/bin/python benchmarks/cluster_bench.py failover -n 3 --session-timeouts 3000,6000
    .venv/bin/python benchmarks/cluster_bench.py lag -n 2 --rates 2000,10000
    .venv/bin/python benchmarks/cluster_bench.py all --json-out /tmp/cluster.json
    # two builds side by side in one run, alternating (the second from another source tree):
    git archive HEAD src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/cluster_bench.py failover -n 6 --session-timeouts 3000 --alt-src /tmp/base
    # the growth curve of issue 28, this checkout against main, alternating:
    git -C /work/main archive main src | tar -x -C /tmp/main-src
    .venv/bin/python benchmarks/cluster_bench.py scale -n 2 --scale-partitions 1000,3000 --alt-src /tmp/main-src

throughput: one broker without ZooKeeper (acks=1, topic RF=1) against three brokers on ZooKeeper (topic
  RF=3, min.insync.replicas=2, acks=all; and acks=1 for reference), the same `strom bench produce`
  workload (1 KB records, 3 partitions), alternating A B C A B C; the ratio per repetition.
failover: an idempotent acks=all producer writes steadily to a partition of RF=3 whose leader is not
  the controller; the leader gets SIGKILL (or SIGTERM: controlled shutdown); the gap is from the last
  acknowledgement before the signal to the first after it (acknowledgement time = produce() time +
  librdkafka's own produce-to-ack latency). Clusters with each session timeout run side by side on one
  ZooKeeper (own chroots) so the settings alternate within one run. For the breakdown, ZooKeeper is
  watched (registration gone, new leader written) and the new leader gets raw acks=all Produce
  requests from the moment ZooKeeper names it: when one is acknowledged is the broker side alone.
lag: `strom bench produce --acks 1 --target-rate R` into a 3-partition RF=3 topic while this script reads
  every replica's log end offset from its active segment file every few ms (followers first, then the
  leader); lag = leader log end - follower log end, in records and in time.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compare.py's helpers

from compare import bench_command, cpu_seconds, fmt, free_port, log, machine, proc_status_bytes  # noqa: E402
from scale import topics_of  # noqa: E402

from strom.bench.stats import percentile  # noqa: E402
from strom.devcluster import BROKER_READY_MARK, ZooKeeperServer  # noqa: E402

# What every cluster broker gets besides its id, listener and log dir. The replica.* settings stay at
# Kafka's defaults (fetch wait 500 ms, min bytes 1, 1 MiB per partition, lag time 30 s), as a user would
# run them.
CLUSTER_SETTINGS = {
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "min.insync.replicas": "2",
}
# ZooKeeper expires sessions in tick-sized steps; its session bound is raised to 10 s whatever the tick.
ZK_TICK_MS = 100
RECORD_SIZE = 1024


# --------------------------------------------------------------------------------------------------
# Processes: every one started here is registered and stopped at the end, whatever happens.


class BrokerNode:
    """One strom broker process on 127.0.0.1 with its own log directory and log file."""

    def __init__(self, broker_id: int, workdir: Path, settings: dict[str, str], src: Path | None = None) -> None:
        self.broker_id = broker_id
        self.src = src  # run the strom package of this source tree instead of the installed one
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port = free_port()  # kept across restarts: the registration names it
        self.settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "admin.listeners": "",
            **settings,
        }
        if "zookeeper.connect" in settings:
            self.settings["broker.id"] = str(broker_id)
        self.proc: subprocess.Popen[bytes] | None = None
        self.hung = False  # a SIGTERM once took longer than terminate()'s dump_after

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> BrokerNode:
        self.workdir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        cmd = [sys.executable, "-m", "strom.cli.main", "broker"]
        for k, v in self.settings.items():
            cmd += ["--override", f"{k}={v}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.src is not None:
            # Ahead of the editable install's .pth entry, so this tree's strom is the one imported.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.src / "src"), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as out:
            # Own session: a Ctrl-C on the terminal reaches this script only, which stops the brokers.
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                         env=env)
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if BROKER_READY_MARK.encode() in f.read():
                    return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.kill()
                raise RuntimeError(f"broker {self.broker_id} did not become ready:\n{tail}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def terminate(self, timeout: float = 60.0, dump_after: float = 20.0) -> float:
        """SIGTERM (a controlled shutdown in a cluster) and wait; the seconds it took to exit. A broker
        still there after ``dump_after`` s has its stacks written next to its log (py-spy dump, when
        installed) before it is killed at ``timeout``: a stop that hangs is a finding."""
        if not self.alive():
            return 0.0
        assert self.proc is not None
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(min(dump_after, timeout))
        except subprocess.TimeoutExpired:
            self.hung = True
            exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            out = self.workdir / f"stop-hang-{int(time.time())}.txt"
            log(f"  broker {self.broker_id} still running {dump_after:.0f} s after SIGTERM; its stacks go to {out}")
            with contextlib.suppress(OSError, subprocess.SubprocessError), open(out, "w") as f:
                subprocess.run([exe, "dump", "--pid", str(self.proc.pid)], stdout=f, stderr=subprocess.STDOUT,
                               timeout=30)
            try:
                self.proc.wait(max(0.0, timeout - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return time.perf_counter() - t0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class LocalCluster:
    """``size`` brokers on one ZooKeeper under their own chroot."""

    def __init__(self, name: str, zk: ZooKeeperServer, workdir: Path, size: int = 3,
                 settings: dict[str, str] | None = None, src: Path | None = None) -> None:
        self.name = name
        self.zk = zk
        self.chroot = f"/{name}"
        common = {"zookeeper.connect": zk.connect + self.chroot, **CLUSTER_SETTINGS, **(settings or {})}
        self.nodes = {i: BrokerNode(i, workdir / f"{name}-broker-{i}", common, src) for i in range(1, size + 1)}
        self._kazoo: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive())

    def pids(self) -> dict[int, int]:
        return {i: n.pid for i, n in self.nodes.items() if n.alive()}

    def start(self) -> LocalCluster:
        errors: list[BaseException] = []

        def start_one(n: BrokerNode) -> None:
            try:
                n.start()
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=start_one, args=(n,)) for n in self.nodes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.wait_registered()
        return self

    def stop(self) -> None:
        if self._kazoo is not None:
            with contextlib.suppress(Exception):
                self._kazoo.stop()
                self._kazoo.close()
            self._kazoo = None
        for n in self.nodes.values():
            n.terminate(30)

    @property
    def kazoo(self) -> Any:
        """A ZooKeeper client of this script's, under the cluster's chroot (to watch its state)."""
        if self._kazoo is None:
            from kazoo.client import KazooClient

            self._kazoo = KazooClient(hosts=self.zk.connect + self.chroot, timeout=10)
            self._kazoo.start(10)
        return self._kazoo

    def registered(self) -> list[int]:
        from strom.cluster import zk_layout as zl

        return sorted(int(c) for c in self.kazoo.get_children(zl.BROKER_IDS))

    def controller(self) -> int:
        from kazoo.exceptions import NoNodeError

        from strom.cluster import zk_layout as zl

        try:
            return zl.decode_controller(self.kazoo.get(zl.CONTROLLER)[0])
        except NoNodeError:
            return -1

    def state(self, topic: str, partition: int) -> Any:
        from kazoo.exceptions import NoNodeError

        from strom.cluster import zk_layout as zl

        try:
            data, stat = self.kazoo.get(zl.state_path(topic, partition))
        except NoNodeError:
            return None
        return zl.decode_state(data, stat.version)

    def wait_registered(self, timeout: float = 60.0) -> None:
        wait_for(lambda: self.registered() == sorted(self.nodes) and self.controller() in self.nodes, timeout,
                 f"{self.name}: every broker registered and a controller elected")

    def wait_full_isr(self, topic: str, partitions: int, timeout: float = 60.0) -> None:
        def full() -> bool:
            for p in range(partitions):
                s = self.state(topic, p)
                if s is None or s.leader < 0 or len(s.isr) != len(self.nodes):
                    return False
            return True

        wait_for(full, timeout, f"{self.name}: every replica of {topic} in the ISR")


class Processes:
    """What this run started, to stop it all in a ``finally`` (Ctrl-C and SIGTERM included)."""

    def __init__(self, zk_tick_ms: int = ZK_TICK_MS) -> None:
        self.zk_tick_ms = zk_tick_ms
        self.zookeepers: list[ZooKeeperServer] = []
        self.clusters: list[LocalCluster] = []
        self.brokers: list[BrokerNode] = []

    def zookeeper(self, data_dir: Path) -> ZooKeeperServer:
        zk = ZooKeeperServer(data_dir, tick_ms=self.zk_tick_ms, max_session_ms=max(20 * self.zk_tick_ms, 10_000))
        self.zookeepers.append(zk)
        return zk.start()

    def cluster(self, name: str, zk: ZooKeeperServer, workdir: Path, settings: dict[str, str] | None = None,
                src: Path | None = None) -> LocalCluster:
        c = LocalCluster(name, zk, workdir, settings=settings, src=src)
        self.clusters.append(c)
        return c.start()

    def broker(self, workdir: Path, settings: dict[str, str] | None = None) -> BrokerNode:
        b = BrokerNode(0, workdir, settings or {})
        self.brokers.append(b)
        return b.start()

    def any_hung(self) -> bool:
        return any(n.hung for c in self.clusters for n in c.nodes.values()) or any(b.hung for b in self.brokers)

    def stop_all(self) -> None:
        for c in self.clusters:
            c.stop()
        for b in self.brokers:
            b.terminate(30)
        for zk in self.zookeepers:
            zk.stop()


def quiet_logger() -> logging.Logger:
    """librdkafka logs every refused connection to stderr; a broker killed on purpose is not news."""
    logger = logging.getLogger("cluster_bench.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # ZooKeeper or a broker still coming up: ask again
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, replication_factor: int = 1,
                 assignment: list[list[int]] | None = None, config: dict[str, str] | None = None) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet_logger()}
    admin = AdminClient(conf)
    if assignment is not None:
        new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})
    else:
        new = NewTopic(topic, partitions, replication_factor, config=config or {})
    deadline = time.monotonic() + 15
    while True:
        try:
            admin.create_topics([new], operation_timeout=30)[topic].result(60)
            break
        except KafkaException as e:
            # Right after a broker registered again, the controller's view of the live brokers may
            # lag ZooKeeper's (seen once in ~80 failovers); say so rather than hide it.
            if e.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                raise
            log(f"  CreateTopics {topic}: {e.args[0].str()}; asking again")
            time.sleep(0.2)

    def ready() -> bool:
        tmd = admin.list_topics(topic, timeout=5).topics.get(topic)
        return tmd is not None and tmd.error is None and len(tmd.partitions) == (len(assignment) if assignment else partitions) \
            and all(p.leader >= 0 for p in tmd.partitions.values())

    wait_for(ready, 30, f"leaders for {topic}")


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt_spread(s: dict[str, float] | None, unit: str = "") -> str:
    if not s:
        return "-"
    return f"{fmt(s['median'])}{unit} ({fmt(s['min'])}-{fmt(s['max'])}, n={int(s['n'])})"


# --------------------------------------------------------------------------------------------------
# 1. Throughput


@dataclass
class ThroughputVariant:
    key: str  # as --variants names it
    label: str
    acks: str
    cluster: str | None  # None: the single broker


def run_bench(bootstrap: str, pids: dict[str, int], args: list[str], timeout: float,
              settle: Callable[[], float | None] | None = None) -> dict[str, Any]:
    """One ``strom bench produce --json`` subprocess, with the CPU seconds every broker spent meanwhile;
    ``settle`` (waiting for the followers to catch up; returns how long that took) runs before the CPU
    is read, so replication that outlasts the producer is counted here and not in the next run."""
    cmd = bench_command("produce", bootstrap, args)
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"bench did not finish within {timeout:.0f} s"}
    result: dict[str, Any]
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": f"bench exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    if settle is not None:
        result["replicas_caught_up_after_s"] = settle()
    result["broker_cpu_s"] = {k: round(cpu_seconds(p) - cpu0[k], 3) for k, p in pids.items()}
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    return result


def py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "--nonblocking",
                             "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_py_spy(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def throughput(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    alt_settings = dict(kv.split("=", 1) for kv in args.alt_setting)
    alt_desc = " ".join([*(f"{k}={v}" for k, v in alt_settings.items()), *([f"src={args.alt_src}"] if args.alt_src else [])])
    every = [ThroughputVariant("single", "single acks=1", "1", None),
             ThroughputVariant("all", "cluster acks=all", "all", "main"),
             ThroughputVariant("acks1", "cluster acks=1", "1", "main"),
             ThroughputVariant("alt", f"alt cluster acks=all ({alt_desc})", "all", "alt")]
    wanted = args.variants.split(",") if args.variants else \
        ["single", "all", "acks1", *(["alt"] if alt_settings or args.alt_src else [])]
    variants = [v for v in every if v.key in wanted]
    log(f"throughput: starting one broker (no ZooKeeper), ZooKeeper and clusters of three; {[v.label for v in variants]}")
    single = procs.broker(workdir / "single")
    zk = procs.zookeeper(workdir / "zookeeper-throughput")
    clusters = {"main": procs.cluster("throughput", zk, workdir, {"zookeeper.session.timeout.ms": "6000"})}
    if any(v.cluster == "alt" for v in variants):
        clusters["alt"] = procs.cluster("throughput-alt", zk, workdir,
                                        {"zookeeper.session.timeout.ms": "6000", **alt_settings}, args.alt_src)
    bench_args = ["--records", str(args.records), "--record-size", str(RECORD_SIZE), "--linger-ms", "5",
                  "--duration", f"{args.max_seconds:g}", "--timeout", "30", "--no-progress"]
    runs: dict[str, list[dict[str, Any]]] = {v.label: [] for v in variants}
    for rep in range(args.repetitions):
        for v in variants:
            topic = f"tput-{v.key}-{rep}"
            settle: Callable[[], float | None] | None = None
            if v.cluster is not None:
                cluster = clusters[v.cluster]
                create_topic(cluster.bootstrap, topic, args.partitions, 3, config={"min.insync.replicas": "2"})
                cluster.wait_full_isr(topic, args.partitions)
                bootstrap = cluster.bootstrap
                pids = {f"broker {i}": p for i, p in cluster.pids().items()}
                settle = functools.partial(wait_caught_up, cluster, topic, args.partitions, 120)
            else:
                create_topic(single.bootstrap, topic, args.partitions, 1)
                bootstrap = single.bootstrap
                pids = {"broker": single.pid}
            spies = []
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                spies = [py_spy(pid, args.profile / f"{v.key}-{rep}-{name.replace(' ', '')}.txt")
                         for name, pid in pids.items()]
            result = run_bench(bootstrap, pids, ["--topic", topic, "--acks", v.acks, *bench_args],
                               timeout=args.max_seconds + 120, settle=settle)
            stop_py_spy(spies)
            if v.cluster is not None and "error" not in result:
                result["replicas_identical"] = replicas_identical(clusters[v.cluster], topic, args.partitions)
            result["repetition"] = rep
            runs[v.label].append(result)
            log(f"  rep {rep + 1}/{args.repetitions} {v.label:<17} " + (
                result.get("error") or f"{result['mb_per_s']:7.1f} MB/s  {result['records_per_s']:9,.0f} rec/s  "
                f"acked {result['records']['acknowledged']}/{result['records']['sent']}  "
                f"p99 {result['latency_ms']['p99'] if result.get('latency_ms') else '-'} ms  "
                f"broker CPU {result['broker_cpu_s']}  replicas caught up {result.get('replicas_caught_up_after_s')}"))
    for c in clusters.values():
        c.stop()
    single.terminate()
    base = "single acks=1"
    out: dict[str, Any] = {"command_bench": "strom bench produce --json -b <bootstrap> --topic <new topic> --acks <acks> "
                                            + " ".join(bench_args),
                           "partitions": args.partitions, "runs": runs, "figures": {}}
    for v in variants:
        rs = [r for r in runs[v.label] if "error" not in r]
        out["figures"][v.label] = {
            "mb_per_s": spread([r["mb_per_s"] for r in rs]),
            "records_per_s": spread([r["records_per_s"] for r in rs]),
            "latency_p50_ms": spread([(r.get("latency_ms") or {}).get("p50") for r in rs]),
            "latency_p99_ms": spread([(r.get("latency_ms") or {}).get("p99") for r in rs]),
            "broker_cpu_s_total": spread([sum(r["broker_cpu_s"].values()) for r in rs]),
            "broker_cpu_s_per_gb": spread([sum(r["broker_cpu_s"].values()) / (r["bytes"] / 1e9) for r in rs if r["bytes"]]),
            "client_cpu_s": spread([r.get("client_cpu_s") for r in rs]),
            "all_acknowledged": all(r.get("ok") for r in runs[v.label]),
            "replicas_identical": all(r.get("replicas_identical", True) for r in runs[v.label]),
        }
        # Per repetition pair; to the single broker, and for the alternative cluster also to the main one.
        for denominator in ([base] if base in runs else []) + (["cluster acks=all"] if v.cluster == "alt" else []):
            if v.label == denominator or denominator not in runs:
                continue
            ratios = [r["mb_per_s"] / b["mb_per_s"] for r, b in zip(runs[v.label], runs[denominator], strict=True)
                      if "error" not in r and "error" not in b and b["mb_per_s"]]
            out["figures"][v.label][f"ratio_to_{denominator}"] = spread(ratios)
    return out


def print_throughput(res: dict[str, Any]) -> None:
    print(f"\nthroughput ({res['partitions']} partitions, 1 KB records): {res['command_bench']}")
    for label, f in res["figures"].items():
        print(f"  {label:<17} MB/s {fmt_spread(f['mb_per_s'])}; p50 {fmt_spread(f['latency_p50_ms'], ' ms')}; "
              f"p99 {fmt_spread(f['latency_p99_ms'], ' ms')}; brokers' CPU s/GB {fmt_spread(f['broker_cpu_s_per_gb'])}; "
              f"all acknowledged: {f['all_acknowledged']}; replicas identical: {f['replicas_identical']}")
        for k, v in f.items():
            if k.startswith("ratio_to_"):
                print(f"  {'':<17} ratio to {k[9:]}: {fmt_spread(v)}")


# --------------------------------------------------------------------------------------------------
# 2. Failover: the gap in acknowledgements when a leader dies


def outage(ack_times: Sequence[float], at: float) -> tuple[float, float] | None:
    """The longest stretch without an acknowledgement that ends after ``at`` (the signal): (last
    acknowledgement before it, first one after it); None when nothing was acknowledged after ``at``.

    Not simply "the last ack before the signal": responses the dying leader had already sent still
    arrive for a few ms after the signal, so the silence starts at the last of those."""
    ts = sorted(ack_times)
    best: tuple[float, float] | None = None
    for a, b in zip(ts, ts[1:], strict=False):
        if b > at and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
    return best


# The failover producer's settings; everything else stays at librdkafka's defaults, which is what decides
# how fast a client finds the new leader (named here so the report can say what was used).
FAILOVER_CLIENT: dict[str, Any] = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
LIBRDKAFKA_DEFAULTS_THAT_MATTER = {
    "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 10000, "topic.metadata.refresh.interval.ms": 300000,
    "request.timeout.ms": 30000, "message.timeout.ms": 300000}


class SteadyProducer:
    """An idempotent acks=all producer sending ``rate`` numbered records a second from a thread; each
    acknowledgement is timed as produce() time + librdkafka's own produce-to-ack latency, so when the
    callback runs does not matter."""

    def __init__(self, bootstrap: str, topic: str, rate: float, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.rate = rate
        self.config = {"bootstrap.servers": bootstrap, "client.id": "strom-cluster-bench", **FAILOVER_CLIENT, **config}
        self.config["logger"] = quiet_logger()
        self.producer = Producer({**self.config, "on_delivery": self._on_delivery})
        self.sent_at = array("d")
        self.acked_at = array("d")
        self.errors: dict[str, int] = {}
        self.sent = 0
        self._padding = b"x" * (RECORD_SIZE - 8)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] = self.errors.get(err.name(), 0) + 1
            return
        (seq,) = struct.unpack_from(">q", msg.value())
        latency = msg.latency()
        if latency is not None:
            self.acked_at.append(self.sent_at[seq] + latency)

    def start(self) -> SteadyProducer:
        self.producer.list_topics(self.topic, timeout=10)
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.perf_counter()
        produce = self.producer.produce
        while not self._stop.is_set():
            due = start + self.sent / self.rate
            now = time.perf_counter()
            if now < due:
                self.producer.poll(min(due - now, 0.01))
                continue
            now = time.perf_counter()
            try:
                produce(self.topic, struct.pack(">q", self.sent) + self._padding)
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.sent_at.append(now)
            self.sent += 1
            self.producer.poll(0)

    def stop(self, flush_s: float) -> int:
        """Stop sending and wait (bounded) for the outstanding acknowledgements; returns how many are left."""
        self._stop.set()
        self._thread.join(10)
        return int(self.producer.flush(flush_s))

    def acks_after(self, t: float) -> int:
        return sum(1 for a in self.acked_at if a > t)


def probe_leader(port: int, topic: str, seen: dict[str, float], timeout: float = 15.0) -> None:
    """One acks=all Produce sent straight to the new leader as soon as ZooKeeper names it, and again
    every 5 ms while it answers with an error (it may not have applied its leadership yet). When it is
    acknowledged, the leader's ISR has fetched from it: what acks=all waits for, with no client
    metadata timers in the way."""
    import datetime

    from kio.schema.produce.v9 import request as produce_req
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    from strom.protocol import wire
    from strom.records.codec import build_batch

    batch = build_batch([(None, b"probe")], timestamp_ms=int(time.time() * 1000))
    body = produce_req.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(produce_req.TopicProduceData(name=TopicName(topic), partition_data=(
            produce_req.PartitionProduceData(index=i32(0), records=batch),)),))
    deadline = time.monotonic() + timeout
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for correlation in range(1, 10_000):
            sock.sendall(wire.encode_request(0, 9, correlation, "strom-cluster-bench-probe", body))
            size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
            _, resp = wire.decode_response(0, 9, _recv_exactly(sock, size))
            if resp.responses[0].partition_responses[0].error_code == 0:
                seen["probe_acked"] = time.perf_counter()
                return
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def watch_state(cluster: LocalCluster, topic: str, old_leader: int, stop: threading.Event,
                seen: dict[str, float]) -> None:
    """Note when ZooKeeper shows the old leader's registration gone and a new leader (for the breakdown),
    and probe the new leader then."""
    from strom.cluster import zk_layout as zl

    probe: threading.Thread | None = None
    while not stop.is_set():
        now = time.perf_counter()
        with contextlib.suppress(Exception):
            if "registration_gone" not in seen and cluster.kazoo.exists(zl.broker_path(old_leader)) is None:
                seen["registration_gone"] = now
            s = cluster.state(topic, 0)
            if "new_leader" not in seen and s is not None and s.leader not in (old_leader, -1):
                seen["new_leader"] = now
                seen["new_leader_id"] = s.leader
                probe = threading.Thread(target=probe_leader, args=(cluster.nodes[s.leader].port, topic, seen),
                                         daemon=True)
                probe.start()
        time.sleep(0.005)
    if probe is not None:
        probe.join(25)


def failover_once(cluster: LocalCluster, session_ms: int, how: str, rep: int, args: argparse.Namespace,
                  client: dict[str, Any]) -> dict[str, Any]:
    controller = cluster.controller()
    if args.leader == "controller":
        leader = controller  # its death also needs a new controller before anything moves
    else:
        candidates = sorted(i for i in cluster.nodes if i != controller)
        leader = candidates[rep % len(candidates)]
    others = [i for i in sorted(cluster.nodes) if i != leader]
    topic = f"failover-{how}-{rep}"
    create_topic(cluster.bootstrap, topic, assignment=[[leader, *others]], config={"min.insync.replicas": "2"})
    cluster.wait_full_isr(topic, 1)
    res: dict[str, Any] = {"session_timeout_ms": session_ms, "signal": how, "repetition": rep, "leader": leader,
                           "controller": controller}
    producer = SteadyProducer(cluster.bootstrap, topic, args.rate, client).start()
    seen: dict[str, float] = {}
    stop_watch = threading.Event()
    watcher = threading.Thread(target=watch_state, args=(cluster, topic, leader, stop_watch, seen), daemon=True)
    try:
        time.sleep(args.steady_seconds)
        watcher.start()
        node = cluster.nodes[leader]
        t_signal = time.perf_counter()
        exit_s: float | None = None
        if how == "kill":
            node.kill()
        else:
            exit_s = node.terminate()
        # Wait for acknowledgements to flow again for a while (bounded well past the session timeout).
        deadline = t_signal + session_ms / 1000 + args.recover_seconds
        while time.perf_counter() < deadline:
            if producer.acks_after(t_signal) >= args.rate * args.steady_seconds:
                break
            time.sleep(0.05)
    finally:
        stop_watch.set()
        left = producer.stop(30)
        if watcher.is_alive():
            watcher.join(30)
    acks = list(producer.acked_at)
    gap = outage(acks, t_signal)
    res.update({
        "sent": producer.sent, "acknowledged": len(acks), "unresolved_after_flush": left, "errors": producer.errors,
        "gap_s": gap[1] - gap[0] if gap else None,
        "gap_starts_after_signal_s": gap[0] - t_signal if gap else None,  # negative: before the signal
        "signal_to_first_ack_s": gap[1] - t_signal if gap else None,
        "leader_exit_s": exit_s,
        "registration_gone_s": seen["registration_gone"] - t_signal if "registration_gone" in seen else None,
        "new_leader_in_zookeeper_s": seen["new_leader"] - t_signal if "new_leader" in seen else None,
        "new_leader": seen.get("new_leader_id"),
    })
    if gap is not None and "new_leader" in seen:
        res["client_after_new_leader_s"] = gap[1] - seen["new_leader"]  # what the client adds
    if "probe_acked" in seen and "new_leader" in seen:
        res["new_leader_acks_all_after_s"] = seen["probe_acked"] - seen["new_leader"]
    # Bring the broker back and let it catch up, so the next run starts from a whole cluster.
    cluster.nodes[leader].start()
    cluster.wait_registered()
    cluster.wait_full_isr(topic, 1)
    return res


def failover(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    import confluent_kafka

    timeouts = [int(x) for x in args.session_timeouts.split(",")]
    signals = args.signals.split(",")
    alt_settings = dict(kv.split("=", 1) for kv in args.alt_setting)
    # With --alt-src/--alt-setting each session timeout gets a second cluster, and the two alternate.
    builds = ["main", *(["alt"] if args.alt_src or alt_settings else [])]
    log(f"failover: starting ZooKeeper and a cluster of three per session timeout {timeouts} and build {builds}")
    zk = procs.zookeeper(workdir / "zookeeper-failover")
    clusters = {(ms, b): procs.cluster(f"failover-{ms}-{b}", zk, workdir,
                                       {"zookeeper.session.timeout.ms": str(ms), **(alt_settings if b == "alt" else {})},
                                       args.alt_src if b == "alt" else None)
                for ms in timeouts for b in builds}
    client = dict(kv.split("=", 1) for kv in args.producer_property)
    runs: list[dict[str, Any]] = []
    for rep in range(args.repetitions):
        for ms in timeouts:
            for how in signals:
                for b in builds:
                    r = failover_once(clusters[(ms, b)], ms, how, rep, args, client)
                    r["build"] = b
                    runs.append(r)
                    log(f"  rep {rep + 1}/{args.repetitions} session {ms} ms {how:<4} {b:<4}: gap "
                        f"{fmt(r['gap_s'])} s (signal -> first ack {fmt(r['signal_to_first_ack_s'])} s; ZooKeeper: "
                        f"registration gone {fmt(r['registration_gone_s'])} s, new leader "
                        f"{fmt(r['new_leader_in_zookeeper_s'])} s, a raw acks=all Produce to it acknowledged "
                        f"{fmt(r.get('new_leader_acks_all_after_s'))} s after that); leader {r['leader']} -> {r['new_leader']}, "
                        f"acked {r['acknowledged']}/{r['sent']}, errors {r['errors'] or 'none'}")
    for c in clusters.values():
        c.stop()
    summary: dict[str, Any] = {}
    for ms in timeouts:
        for how in signals:
            for b in builds:
                rs = [r for r in runs if r["session_timeout_ms"] == ms and r["signal"] == how and r["build"] == b]
                target = ms / 1000 + 1 if how == "kill" else 1.0
                gaps = spread([r["gap_s"] for r in rs])
                name = f"{how} session={ms}ms" + ("" if b == "main" else f" alt ({args.alt_src or ''} {alt_settings or ''})")
                summary[name] = {
                    "gap_s": gaps, "target_s": target,
                    "met": gaps is not None and gaps["max"] <= target and all(r["gap_s"] is not None for r in rs),
                    "registration_gone_s": spread([r["registration_gone_s"] for r in rs]),
                    "new_leader_in_zookeeper_s": spread([r["new_leader_in_zookeeper_s"] for r in rs]),
                    "signal_to_first_ack_s": spread([r["signal_to_first_ack_s"] for r in rs]),
                    "gap_starts_after_signal_s": spread([r["gap_starts_after_signal_s"] for r in rs]),
                    "client_after_new_leader_s": spread([r.get("client_after_new_leader_s") for r in rs]),
                    "new_leader_acks_all_after_s": spread([r.get("new_leader_acks_all_after_s") for r in rs]),
                    "lost_or_failed": sum(r["unresolved_after_flush"] + sum(r["errors"].values()) for r in rs),
                }
    return {"rate": args.rate, "leader": args.leader, "client": {**FAILOVER_CLIENT, **client},
            "librdkafka_defaults_in_play": {k: v for k, v in LIBRDKAFKA_DEFAULTS_THAT_MATTER.items() if k not in client},
            "librdkafka": confluent_kafka.libversion()[0], "runs": runs, "summary": summary}


def print_failover(res: dict[str, Any]) -> None:
    print(f"\nfailover (leader: {'the controller' if res.get('leader') == 'controller' else 'not the controller'}; "
          f"an idempotent acks=all producer at {res['rate']:g} records/s, librdkafka {res['librdkafka']}; "
          f"client {res['client']})")
    for name, s in res["summary"].items():
        print(f"  {name:<20} gap {fmt_spread(s['gap_s'], ' s')} (median (min-max)); target <= {s['target_s']:g} s: "
              f"{'met' if s['met'] else 'missed'}; ZooKeeper shows a new leader after "
              f"{fmt_spread(s['new_leader_in_zookeeper_s'], ' s')}, which acknowledges a raw acks=all Produce "
              f"{fmt_spread(s['new_leader_acks_all_after_s'], ' s')} after that; the steady producer "
              f"{fmt_spread(s['client_after_new_leader_s'], ' s')} after it; records lost or failed: {s['lost_or_failed']}")


# --------------------------------------------------------------------------------------------------
# 4. Scale: CreateTopics of thousands of partitions, a controlled shutdown of a broker leading a third
# of them, and its return (issue 28)


def states_now(cluster: LocalCluster, topic: str, partitions: int) -> list[Any]:
    """Every partition's state as ZooKeeper has it, read with pipelined gets (one poll of 3,000
    partitions in a few hundred ms)."""
    from kazoo.exceptions import NoNodeError

    from strom.cluster import zk_layout as zl

    zk = cluster.kazoo
    pending = [zk.get_async(zl.state_path(topic, p)) for p in range(partitions)]
    out: list[Any] = []
    for r in pending:
        try:
            data, stat = r.get(timeout=30)
            out.append(zl.decode_state(data, stat.version))
        except NoNodeError:
            out.append(None)
    return out


def leaderless_in_metadata(bootstrap: str, topic: str, partitions: int) -> int:
    """Partitions of ``topic`` without a leader in this one broker's Metadata answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": quiet_logger()})
    deadline = time.monotonic() + 60
    while True:
        try:
            tmd = admin.list_topics(topic, timeout=10).topics.get(topic)
            break
        except KafkaException:  # the broker too busy to answer within 10 s: a finding, and ask again
            if time.monotonic() > deadline:
                return -1
    if tmd is None or tmd.error is not None:
        return partitions
    return partitions - sum(1 for p in tmd.partitions.values() if p.leader >= 0)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> float | None:
    """Seconds until ``check`` held (from the call), or None after ``timeout``."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        with contextlib.suppress(Exception):
            if check():
                return time.perf_counter() - t0
        time.sleep(interval)
    return None


def proc_status_mb(pid: int, key: str) -> float | None:
    """VmRSS or VmHWM (peak RSS) of a process from /proc, in MB."""
    value = proc_status_bytes(pid, key)
    return None if value is None else value / 2**20


def topic_dirs(node: BrokerNode, topic: str) -> int:
    """A broker's partition directories of ``topic``, live or set aside for deletion."""
    prefix = f"{topic}-"
    try:
        return sum(1 for d in os.scandir(node.data_dir) if d.name.startswith(prefix))
    except OSError:
        return 0


def stop_phases(log_text: str) -> dict[str, float]:
    """From a stopping broker's log: seconds from "shutting down" to the controlled shutdown's last
    line and to "stopped cleanly" (the log's own timestamps, millisecond precision)."""
    import datetime

    def at(line: str) -> float:
        return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()

    start = moved = end = None
    for line in log_text.splitlines():
        with contextlib.suppress(ValueError):
            if "shutting down" in line and "strom broker" in line:
                start = at(line)
            elif "controlled shutdown:" in line:
                moved = at(line)
            elif "stopped cleanly" in line:
                end = at(line)
    out: dict[str, float] = {}
    if start is not None and moved is not None:
        out["moved_logged_s"] = moved - start
    if moved is not None and end is not None:
        out["after_moved_s"] = end - moved
    return out


def scale_once(cluster: LocalCluster, partitions: int, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = topics_of(partitions, f"scale-{rep}-")  # created one after another
    res: dict[str, Any] = {"partitions": partitions, "load_before": os.getloadavg()[0]}
    n = len(cluster.nodes)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": quiet_logger()})
    t0 = time.perf_counter()
    for topic, count in topics:
        admin.create_topics([NewTopic(topic, count, n)], operation_timeout=300, request_timeout=330)[topic].result(360)
    res["create_answer_s"] = time.perf_counter() - t0
    # Right after the answer: every broker's own Metadata.
    res["leaderless_after_answer"] = {b: sum(leaderless_in_metadata(node.bootstrap, t, k) for t, k in topics)
                                      for b, node in cluster.nodes.items()}

    def all_states() -> list[Any]:
        return [s for t, k in topics for s in states_now(cluster, t, k)]

    def full() -> bool:
        return all(s is not None and s.leader >= 0 and len(s.isr) == n for s in all_states())

    # From the request: the "every ISR full within 30 s of the request".
    took = wait_until(full, args.isr_timeout, 0.2)
    res["create_isr_full_s"] = None if took is None else time.perf_counter() - t0

    def logs_made() -> bool:  # every replica's log directory made, its partition.metadata in place
        return all(sum(1 for t, _ in topics for _ in node.data_dir.glob(f"{t}-*/partition.metadata")) == partitions
                   for node in cluster.nodes.values())

    took = wait_until(logs_made, args.isr_timeout, 0.2)
    res["create_logs_made_s"] = None if took is None else time.perf_counter() - t0
    res["rss_after_create_mb"] = max(proc_status_mb(node.pid, "VmRSS") or 0 for node in cluster.nodes.values())
    # The broker (not the controller) leading the most partitions: SIGTERM.
    states = all_states()
    ctrl = cluster.controller()
    counts = {b: sum(1 for s in states if s is not None and s.leader == b) for b in cluster.nodes if b != ctrl}
    victim = max(counts, key=lambda b: counts[b])
    res["victim_led"] = counts[victim]
    node = cluster.nodes[victim]
    moved_at: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        t_start = time.perf_counter()
        while not stop.is_set():
            if not any(s is not None and s.leader == victim for s in all_states()):
                moved_at.append(time.perf_counter() - t_start)
                return
            time.sleep(0.05)

    offset = node.log_path.stat().st_size
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    res["shutdown_exit_s"] = node.terminate(180)
    watcher.join(30)
    stop.set()
    res["leaderships_moved_s"] = moved_at[0] if moved_at else None
    with open(node.log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    said = [line for line in text.splitlines() if "controlled shutdown" in line]
    res["victim_log"] = said[-1].split("strom.cluster", 1)[-1].strip()[:200] if said else None
    res["stop_phases"] = stop_phases(text)
    res["moved_logged_s"] = res["stop_phases"].get("moved_logged_s")
    res["after_moved_s"] = res["stop_phases"].get("after_moved_s")
    still = sum(1 for s in all_states() if s is not None and s.leader == victim)
    res["led_by_stopped_broker"] = still
    # Back again: every ISR full.
    t1 = time.perf_counter()
    node.start(timeout=300)
    took = wait_until(full, args.isr_timeout, 0.2)
    res["rejoin_isr_full_s"] = None if took is None else time.perf_counter() - t1
    res["rss_peak_mb"] = max(proc_status_mb(nd.pid, "VmHWM") or 0 for nd in cluster.nodes.values())
    # Deleted: the answer, then gone from ZooKeeper and every broker's Metadata, then every log removed.
    from kazoo.exceptions import NoNodeError

    from strom.cluster import zk_layout as zl

    t2 = time.perf_counter()
    names = [t for t, _ in topics]
    for future in admin.delete_topics(names, operation_timeout=300, request_timeout=330).values():
        future.result(360)
    res["delete_answer_s"] = time.perf_counter() - t2

    def gone() -> bool:
        if any(cluster.kazoo.exists(zl.topic_path(t)) is not None for t in names):
            return False
        # Every topic's metadata, not these: a Metadata request naming one would create it again
        # (librdkafka asks for auto-creation, and brokers have auto.create.topics.enable).
        return not any(set(names) & set(AdminClient({"bootstrap.servers": nd.bootstrap, "logger": quiet_logger()})
                                        .list_topics(timeout=10).topics) for nd in cluster.nodes.values())

    took = wait_until(gone, args.isr_timeout, 0.1)
    res["delete_gone_s"] = None if took is None else time.perf_counter() - t2
    took = wait_until(lambda: not any(topic_dirs(nd, t) for nd in cluster.nodes.values() for t in names),
                      args.isr_timeout, 0.2)
    res["delete_logs_gone_s"] = None if took is None else time.perf_counter() - t2
    for t in names:
        with contextlib.suppress(NoNodeError):
            res["znodes_left"] = res.get("znodes_left", 0) + len(cluster.kazoo.get_children(zl.partitions_path(t)))
    res["load_after"] = os.getloadavg()[0]
    return res


SCALE_KEYS = ["create_answer_s", "create_isr_full_s", "create_logs_made_s", "rss_after_create_mb",
              "leaderships_moved_s", "moved_logged_s", "after_moved_s", "shutdown_exit_s", "rejoin_isr_full_s", "rss_peak_mb", "delete_answer_s",
              "delete_gone_s", "delete_logs_gone_s"]


def scale(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    # "this": the strom of this checkout (its src/ first on the path); "alt": the tree of --alt-src.
    builds = ["this", *(["alt"] if args.alt_src else [])]
    sizes = [int(x) for x in args.scale_partitions.split(",")]
    log(f"scale: ZooKeeper and a cluster of three per build {builds}; partitions {sizes}, RF=3")
    zk = procs.zookeeper(workdir / "zookeeper-scale")
    runs: list[dict[str, Any]] = []
    for rep in range(args.repetitions):
        for size in sizes:
            for b in builds:
                # A fresh cluster per run: the deleted topics of the runs before cost nothing.
                c = procs.cluster(f"scale-{b}-{size}-{rep}", zk, workdir, {}, args.alt_src if b == "alt" else ROOT)
                try:
                    r = scale_once(c, size, rep, args)
                finally:
                    c.stop()
                    with contextlib.suppress(OSError):
                        for node in c.nodes.values():
                            shutil.rmtree(node.data_dir, ignore_errors=True)
                r["build"] = b
                runs.append(r)
                log(f"  rep {rep + 1}/{args.repetitions} {size} partitions {b:<4} (load {r['load_before']:.1f}-"
                    f"{r['load_after']:.1f}): CreateTopics answered "
                    f"{fmt(r['create_answer_s'])} s, leaderless in each broker's Metadata right after "
                    f"{r['leaderless_after_answer']}, every ISR full {fmt(r['create_isr_full_s'])} s, every replica's log "
                    f"made {fmt(r['create_logs_made_s'])} s, RSS {r['rss_after_create_mb']:.0f} MB; SIGTERM of a "
                    f"broker leading {r['victim_led']}: all moved {fmt(r['leaderships_moved_s'])} s, exited "
                    f"{fmt(r['shutdown_exit_s'])} s {r['stop_phases']}, still led by it {r['led_by_stopped_broker']} "
                    f"({r['victim_log']}); restarted: every ISR full {fmt(r['rejoin_isr_full_s'])} s; peak RSS "
                    f"{r['rss_peak_mb']:.0f} MB; DeleteTopics answered {fmt(r['delete_answer_s'])} s, gone everywhere "
                    f"{fmt(r['delete_gone_s'])} s, logs removed {fmt(r['delete_logs_gone_s'])} s")
    summary: dict[str, Any] = {}
    for size in sizes:
        for b in builds:
            rs = [r for r in runs if r["partitions"] == size and r["build"] == b]
            summary[f"{size} {b}"] = {k: spread([r[k] for r in rs]) for k in SCALE_KEYS}
            summary[f"{size} {b}"]["leaderless_after_answer_max"] = max(
                max(r["leaderless_after_answer"].values()) for r in rs)
            summary[f"{size} {b}"]["load"] = spread([r["load_before"] for r in rs] + [r["load_after"] for r in rs])
    return {"alt_src": str(args.alt_src) if args.alt_src else None, "runs": runs, "summary": summary}


def print_scale(res: dict[str, Any]) -> None:
    print(f"\nscale (3 brokers, RF=3; this = {ROOT}, alt = {res['alt_src']})")
    for name, s in res["summary"].items():
        print(f"  {name:<12} (load {fmt_spread(s['load'])}) create answered {fmt_spread(s['create_answer_s'], ' s')}, "
              f"leaderless right after (worst broker) {s['leaderless_after_answer_max']}, ISR full "
              f"{fmt_spread(s['create_isr_full_s'], ' s')}, every log made {fmt_spread(s['create_logs_made_s'], ' s')}, "
              f"RSS {fmt_spread(s['rss_after_create_mb'], ' MB')}; "
              f"controlled shutdown: all moved {fmt_spread(s['leaderships_moved_s'], ' s')} (the broker's own account "
              f"{fmt_spread(s['moved_logged_s'], ' s')}, then to 'stopped cleanly' {fmt_spread(s['after_moved_s'], ' s')}), exited "
              f"{fmt_spread(s['shutdown_exit_s'], ' s')}; rejoin ISR full {fmt_spread(s['rejoin_isr_full_s'], ' s')}; "
              f"peak RSS {fmt_spread(s['rss_peak_mb'], ' MB')}; delete answered {fmt_spread(s['delete_answer_s'], ' s')}, "
              f"gone {fmt_spread(s['delete_gone_s'], ' s')}, logs removed {fmt_spread(s['delete_logs_gone_s'], ' s')}")


# --------------------------------------------------------------------------------------------------
# 3. Follower lag, from the log end offsets in the segment files

_BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength (what follows the length)
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4, attributes 2
_PREFIX = 12


class LogEndReader:
    """A replica's log end offset read from its newest segment file, incrementally: each call reads only
    the headers of the batches written since the last one (a batch counts once it is all on file)."""

    def __init__(self, partition_dir: Path) -> None:
        self.dir = partition_dir
        self._segment: str | None = None
        self._fd = -1
        self._pos = 0
        self._end = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def log_end(self) -> int:
        newest = max((n for n in os.listdir(self.dir) if n.endswith(".log")), default=None)
        if newest is None:
            return 0
        if newest != self._segment:
            self.close()
            self._segment = newest
            self._fd = os.open(self.dir / newest, os.O_RDONLY)
            self._pos = 0
            self._end = int(newest[:-4])  # the base offset in the name: the end of an empty segment
        size = os.fstat(self._fd).st_size
        if size < self._pos:  # truncated (a follower matching its leader): read it again
            self._pos, self._end = 0, int(newest[:-4])
        while self._pos + _LAST_OFFSET_DELTA_AT + 4 <= size:
            head = os.pread(self._fd, _LAST_OFFSET_DELTA_AT + 4, self._pos)
            if len(head) < _LAST_OFFSET_DELTA_AT + 4:
                break
            base, length = _BATCH_PREFIX.unpack_from(head)
            if length <= 0 or self._pos + _PREFIX + length > size:
                break
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_AT)
            self._end = base + delta + 1
            self._pos += _PREFIX + length
        return self._end


@dataclass
class LagSeries:
    """One follower of one partition: (time, leader log end, follower log end) per sample."""

    partition: int
    leader: int
    follower: int
    t: list[float] = field(default_factory=list)
    leader_end: list[int] = field(default_factory=list)
    follower_end: list[int] = field(default_factory=list)


def time_lags(t: Sequence[float], leader_end: Sequence[int], follower_end: Sequence[int]) -> list[float]:
    """Per sample, how long the follower has lacked a record the leader holds (0 when caught up).

    When the follower ends at offset f and the leader's end first passed f at sample j, the record
    reached the leader after sample j-1: the lag is at most t[i] - t[j-1]. That upper bound is what is
    returned, so the figure is exact to one sampling interval and never flatters the follower.
    """
    out = []
    for i, f in enumerate(follower_end):
        if f >= leader_end[i]:
            out.append(0.0)
            continue
        j = bisect.bisect_right(leader_end, f, 0, i + 1)  # leader ends only grow: the first sample past f
        out.append(t[i] - t[max(j - 1, 0)])
    return out


def sample_lag(cluster: LocalCluster, topic: str, partitions: int, interval_s: float, stop: threading.Event,
               series: list[LagSeries]) -> None:
    readers: dict[tuple[int, int], LogEndReader] = {}
    try:
        for s in series:
            for b in (s.leader, s.follower):
                if (s.partition, b) not in readers:
                    readers[(s.partition, b)] = LogEndReader(cluster.nodes[b].data_dir / f"{topic}-{s.partition}")
        next_at = time.perf_counter()
        while not stop.is_set():
            for p in range(partitions):
                mine = [s for s in series if s.partition == p]
                # Followers first, then the leader: a follower is never counted ahead of its leader, and
                # what arrives meanwhile counts as lag (an upper bound by microseconds).
                ends = {s.follower: readers[(p, s.follower)].log_end() for s in mine}
                leader_end = readers[(p, mine[0].leader)].log_end()
                now = time.perf_counter()
                for s in mine:
                    s.t.append(now)
                    s.leader_end.append(leader_end)
                    s.follower_end.append(ends[s.follower])
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.perf_counter()))
    finally:
        for r in readers.values():
            r.close()


_CRC_AT = 17  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1


def batch_digest(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(base offset, length, CRC) of every whole batch in a partition directory, from the headers only."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        fd = os.open(seg, os.O_RDONLY)
        try:
            size, pos = os.fstat(fd).st_size, 0
            while pos + _CRC_AT + 4 <= size:
                head = os.pread(fd, _CRC_AT + 4, pos)
                base, length = _BATCH_PREFIX.unpack_from(head)
                if length <= 0 or pos + _PREFIX + length > size:
                    break
                out.append((base, length, int.from_bytes(head[_CRC_AT:_CRC_AT + 4], "big")))
                pos += _PREFIX + length
        finally:
            os.close(fd)
    return out


def replicas_identical(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    """Every replica of every partition holds the same batches (offsets, lengths, CRCs)."""
    for p in range(partitions):
        views = [batch_digest(n.data_dir / f"{topic}-{p}") for n in cluster.nodes.values()]
        if any(v != views[0] for v in views):
            return False
    return True


def wait_caught_up(cluster: LocalCluster, topic: str, partitions: int, timeout: float) -> float | None:
    """Wait until every replica of every partition ends at the same offset (read from the segment
    files); the seconds that took, None if it did not happen within ``timeout``."""
    t0 = time.perf_counter()
    readers = {(p, b): LogEndReader(n.data_dir / f"{topic}-{p}") for p in range(partitions)
               for b, n in cluster.nodes.items()}
    try:
        while time.perf_counter() - t0 < timeout:
            ends: dict[int, set[int]] = {}
            for (p, _), r in readers.items():
                ends.setdefault(p, set()).add(r.log_end())
            if all(len(e) == 1 for e in ends.values()):
                return time.perf_counter() - t0
            time.sleep(0.01)
        return None
    finally:
        for r in readers.values():
            r.close()


def lag_once(cluster: LocalCluster, rate: int, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    topic = f"lag-{rate}-{rep}"
    partitions = args.partitions
    create_topic(cluster.bootstrap, topic, partitions, 3, config={"min.insync.replicas": "2"})
    cluster.wait_full_isr(topic, partitions)
    series = []
    for p in range(partitions):
        s = cluster.state(topic, p)
        series += [LagSeries(p, s.leader, b) for b in s.isr if b != s.leader]
    stop = threading.Event()
    sampler = threading.Thread(target=sample_lag, args=(cluster, topic, partitions, args.sample_ms / 1000, stop, series),
                               daemon=True)
    sampler.start()
    records = int(rate * args.lag_seconds)
    bench_args = ["--topic", topic, "--acks", "1", "--records", str(records), "--record-size", str(RECORD_SIZE),
                  "--target-rate", str(rate), "--linger-ms", "5", "--duration", f"{args.lag_seconds + 5:g}",
                  "--timeout", "30", "--no-progress"]
    try:
        result = run_bench(cluster.bootstrap, {f"broker {i}": p for i, p in cluster.pids().items()}, bench_args,
                           timeout=args.lag_seconds + 120)
        time.sleep(0.5)  # let the followers finish, so the window's end is seen
    finally:
        stop.set()
        sampler.join(10)
    # The steady window: from a second after the first record reached a leader to the last sample where
    # a leader's log grew (the bench's start-up and the tail after the last send are left out).
    all_t = [t for s in series for t, e in zip(s.t, s.leader_end, strict=True) if e > 0]
    grew = [s.t[i] for s in series for i in range(1, len(s.t)) if s.leader_end[i] > s.leader_end[i - 1]]
    if not all_t or not grew:
        return {"rate": rate, "repetition": rep, "error": "no records reached the leaders", "bench": result}
    lo, hi = min(all_t) + args.warmup_seconds, max(grew)
    lags: list[float] = []
    lag_ms_by_rate: list[float] = []
    lag_ms_by_time: list[float] = []
    per_follower = {}
    for s in series:
        idx = [i for i, t in enumerate(s.t) if lo <= t <= hi]
        if len(idx) < 2:
            continue
        first, last = idx[0], idx[-1]
        part_rate = (s.leader_end[last] - s.leader_end[first]) / (s.t[last] - s.t[first])  # records/s
        mine = [s.leader_end[i] - s.follower_end[i] for i in idx]
        tl = time_lags(s.t, s.leader_end, s.follower_end)
        lags += mine
        if part_rate > 0:
            lag_ms_by_rate += [x / part_rate * 1000 for x in mine]
        lag_ms_by_time += [tl[i] * 1000 for i in idx]
        per_follower[f"{topic}-{s.partition} leader {s.leader} follower {s.follower}"] = {
            "p50": percentile(sorted(mine), 50), "p99": percentile(sorted(mine), 99), "max": max(mine),
            "records_per_s": round(part_rate)}
    lags.sort()
    lag_ms_by_rate.sort()
    lag_ms_by_time.sort()

    def pct(xs: list[float], q: float) -> float | None:
        return percentile(xs, q) if xs else None

    return {
        "rate": rate, "repetition": rep, "window_s": round(hi - lo, 2), "samples": len(lags),
        "produced_records_per_s": result.get("records_per_s"), "acknowledged": (result.get("records") or {}).get("acknowledged"),
        "lag_records": {"p50": pct(lags, 50), "p99": pct(lags, 99), "max": lags[-1] if lags else None},
        "lag_ms_by_rate": {"p50": pct(lag_ms_by_rate, 50), "p99": pct(lag_ms_by_rate, 99),
                           "max": lag_ms_by_rate[-1] if lag_ms_by_rate else None},
        "lag_ms_by_time": {"p50": pct(lag_ms_by_time, 50), "p99": pct(lag_ms_by_time, 99),
                           "max": lag_ms_by_time[-1] if lag_ms_by_time else None},
        "per_follower": per_follower, "broker_cpu_s": result.get("broker_cpu_s"),
        "bench_error": result.get("error"),
    }


def lag(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    rates = [int(x) for x in args.rates.split(",")]
    alt_settings = dict(kv.split("=", 1) for kv in args.alt_setting)
    builds = ["main", *(["alt"] if args.alt_src or alt_settings else [])]
    log(f"lag: starting ZooKeeper and three brokers per build {builds}; rates {rates} records/s of 1 KB, acks=1")
    zk = procs.zookeeper(workdir / "zookeeper-lag")
    clusters = {b: procs.cluster(f"lag-{b}", zk, workdir,
                                 {"zookeeper.session.timeout.ms": "6000", **(alt_settings if b == "alt" else {})},
                                 args.alt_src if b == "alt" else None)
                for b in builds}
    runs = []
    for rep in range(args.repetitions):
        for rate in rates:
            for b in builds:
                r = lag_once(clusters[b], rate, rep, args)
                r["build"] = b
                runs.append(r)
                if "error" in r:
                    log(f"  rep {rep + 1} rate {rate} {b}: ERROR {r['error']}")
                    continue
                cpu = sum((r.get("broker_cpu_s") or {}).values())
                log(f"  rep {rep + 1}/{args.repetitions} rate {rate:>6}/s {b:<4} (got {fmt(r['produced_records_per_s'])}): "
                    f"lag records p50 {fmt(r['lag_records']['p50'])} p99 {fmt(r['lag_records']['p99'])} "
                    f"max {fmt(r['lag_records']['max'])}; ms (lag/rate) p50 {fmt(r['lag_ms_by_rate']['p50'])} "
                    f"p99 {fmt(r['lag_ms_by_rate']['p99'])}; ms (by time) p50 {fmt(r['lag_ms_by_time']['p50'])} "
                    f"p99 {fmt(r['lag_ms_by_time']['p99'])} ({r['samples']} samples over {r['window_s']} s); "
                    f"brokers' CPU {cpu:.2f} s")
    for c in clusters.values():
        c.stop()
    summary: dict[str, Any] = {}
    for rate in rates:
        for b in builds:
            rs = [r for r in runs if r["rate"] == rate and r["build"] == b and "error" not in r]
            name = str(rate) + ("" if b == "main" else f" alt ({args.alt_src or ''} {alt_settings or ''})")
            summary[name] = {k: {q: spread([r[k][q] for r in rs]) for q in ("p50", "p99", "max")}
                             for k in ("lag_records", "lag_ms_by_rate", "lag_ms_by_time")}
            summary[name]["brokers_cpu_s"] = spread([sum((r.get("broker_cpu_s") or {}).values()) for r in rs])
    return {"partitions": args.partitions, "sample_ms": args.sample_ms, "runs": runs, "summary": summary}


def print_lag(res: dict[str, Any]) -> None:
    print(f"\nfollower lag ({res['partitions']} partitions RF=3, acks=1, 1 KB, sampled every {res['sample_ms']} ms; "
          "medians over repetitions of each run's percentile; 'by time' is an upper bound, exact to one sampling "
          "interval)")
    for rate, s in res["summary"].items():
        print(f"  {rate} records/s: records p50 {fmt_spread(s['lag_records']['p50'])} p99 "
              f"{fmt_spread(s['lag_records']['p99'])}; ms (lag / rate) p50 {fmt_spread(s['lag_ms_by_rate']['p50'])} "
              f"p99 {fmt_spread(s['lag_ms_by_rate']['p99'])}; ms (by time) p50 {fmt_spread(s['lag_ms_by_time']['p50'])} "
              f"p99 {fmt_spread(s['lag_ms_by_time']['p99'])}; brokers' CPU per run {fmt_spread(s['brokers_cpu_s'], ' s')}")


# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def interrupted_by_sigterm() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run the way Ctrl-C does: through the ``finally`` that stops everything."""
    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["throughput", "failover", "lag", "scale", "all"])
    p.add_argument("-n", "--repetitions", type=int, default=3)
    p.add_argument("--partitions", type=int, default=3, help="throughput, lag: partitions of the topic (default 3)")
    p.add_argument("--records", type=int, default=1_000_000, help="throughput: records per run (default 1,000,000)")
    p.add_argument("--max-seconds", type=float, default=20.0, help="throughput: stop sending after this long (default 20)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR", help="throughput: py-spy every broker into DIR")
    p.add_argument("--variants", default=None,
                   help="throughput: which of single,all,acks1,alt to run (default: all but alt, and alt when set up)")
    p.add_argument("--alt-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="throughput, failover, lag: run a second cluster with this broker setting too (repeatable)")
    p.add_argument("--alt-src", type=Path, default=None, metavar="DIR",
                   help="throughput, failover, lag: the second cluster runs the strom of this source tree (e.g. "
                        "`git archive HEAD src | tar -x -C DIR`), to compare two builds in one run")
    p.add_argument("--session-timeouts", default="3000,6000", help="failover: zookeeper.session.timeout.ms values")
    p.add_argument("--zk-tick-ms", type=int, default=ZK_TICK_MS,
                   help=f"ZooKeeper's tickTime (default {ZK_TICK_MS}); sessions expire in steps of it")
    p.add_argument("--signals", default="kill,term", help="failover: kill (SIGKILL) and/or term (SIGTERM)")
    p.add_argument("--rate", type=float, default=1000.0, help="failover: records/s (default 1000)")
    p.add_argument("--steady-seconds", type=float, default=3.0, help="failover: producing before the signal and after recovery")
    p.add_argument("--recover-seconds", type=float, default=30.0,
                   help="failover: give up waiting for acknowledgements this long after the session timeout")
    p.add_argument("--leader", choices=["other", "controller"], default="other",
                   help="failover: the partition's leader is a broker other than the controller (default), or the controller")
    p.add_argument("-X", "--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="failover: a librdkafka property for the producer (repeatable)")
    p.add_argument("--rates", default="2000,10000", help="lag: records/s to produce (default 2000,10000)")
    p.add_argument("--lag-seconds", type=float, default=30.0, help="lag: seconds of producing per run (default 30)")
    p.add_argument("--warmup-seconds", type=float, default=2.0, help="lag: left out at the start of each run")
    p.add_argument("--sample-ms", type=float, default=5.0, help="lag: sampling interval (default 5 ms)")
    p.add_argument("--scale-partitions", default="3000", help="scale: partition counts (default 3000)")
    p.add_argument("--isr-timeout", type=float, default=120.0, help="scale: how long to wait for full ISRs")
    p.add_argument("--workdir", type=Path, default=None, help="log directories (default: a temporary directory, removed)")
    p.add_argument("--json-out", type=Path, default=None, help="write the full report (every run) as JSON here")
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="strom-cluster-bench-"))
    report: dict[str, Any] = {"machine": machine(),
                              "command": " ".join(["benchmarks/cluster_bench.py", *(argv or sys.argv[1:])])}
    procs = Processes(args.zk_tick_ms)
    failed = False
    parts = ["throughput", "failover", "lag"] if args.what == "all" else [args.what]
    try:
        with interrupted_by_sigterm():
            for part in parts:
                report[part] = {"throughput": throughput, "failover": failover, "lag": lag, "scale": scale}[part](args, procs, workdir)
    except KeyboardInterrupt:
        log("interrupted: stopping every process this run started")
        return 130
    except Exception:
        failed = True
        raise
    finally:
        procs.stop_all()
        failed = failed or procs.any_hung()
        if args.workdir is None and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif failed:
            log(f"the brokers' and ZooKeeper's logs (and any stop-hang stacks) are kept in {workdir}")
        if args.json_out is not None:
            args.json_out.write_text(json.dumps(report, indent=2, default=str))
    m = report["machine"]
    print(f"machine: {m.get('cpus')} cores, {m.get('cpu', '?')}, load at start {' '.join(m.get('loadavg_at_start', []))}; "
          f"librdkafka {m.get('librdkafka')}\ncommand: {report['command']}")
    for part in parts:
        {"throughput": print_throughput, "failover": print_failover, "lag": print_lag,
         "scale": print_scale}[part](report[part])
    return 0


if __name__ == "__main__":
    sys.exit(main())
