#!/usr/bin/env python3
"""strom side by side with a peer broker (Tansu, Rust, in memory): the workloads of issue 7.

Each workload starts fresh brokers (strom persisting to a temporary log directory, with the workload's
overrides; the peer through ../shared/peer/start-tansu.sh), runs ``strom bench --json`` against them
alternately (A B A B ..., N repetitions) and prints every figure for both with min/median/max and the
ratio strom/peer (per repetition pair, min/median/max). Runs are bounded: each repetition stops sending
after ``--max-seconds`` (the bench's --duration) and is killed if it overruns.

    .venv/bin/python benchmarks/compare.py                      # every workload but scale, 3 repetitions
    .venv/bin/python benchmarks/compare.py -w produce-1k -w e2e -n 5
    .venv/bin/python benchmarks/compare.py --records-factor 0.1 # a quick smoke run
    .venv/bin/python benchmarks/compare.py -w scale             # 1,000 partitions, 200 clients, RSS, restart
    .venv/bin/python benchmarks/compare.py --json > out.json
    .venv/bin/python benchmarks/compare.py --profile /tmp/prof  # py-spy the strom broker during its runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PEER_SCRIPT = Path(os.environ.get("STROM_PEER_SCRIPT", "/work/shared/peer/start-tansu.sh"))
READY_MARK = "ready: listening on"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------------------
# Process figures: CPU time and resident memory from /proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_status_bytes(pid: int, key: str) -> int | None:
    """A memory figure of /proc/<pid>/status (VmRSS, VmHWM: the peak RSS), in bytes; None if
    the process or the line is not there."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes(pid: int) -> int:
    return proc_status_bytes(pid, "VmRSS") or 0


class RssSampler:
    """The peak RSS of a process while a block runs (sampled every 100 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


def established_connections(port: int) -> int:
    """TCP connections established to 127.0.0.1:port (from /proc/net/tcp, server side)."""
    want = f":{port:04X}"
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[1].endswith(want) and parts[3] == "01":
                        count += 1
        except OSError:
            pass
    return count


# --------------------------------------------------------------------------------------------------
# Brokers


class Broker:
    kind = "?"
    pid = 0
    port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def log_tail(self, lines: int = 20) -> str:
        return ""


def _admin_off_supported() -> bool:
    """Whether this strom knows admin.listeners (then the bench turns the admin HTTP server off)."""
    try:
        from strom.config import BrokerConfig

        BrokerConfig.load(None, ["admin.listeners="])
        return True
    except Exception:
        return False


class StromBroker(Broker):
    kind = "strom"

    def __init__(self, overrides: dict[str, str], workdir: Path, python: str = sys.executable) -> None:
        self.overrides = dict(overrides)
        self.workdir = workdir
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "broker.log"
        self.data_dir = workdir / "data"
        self.port = free_port()
        self.ready_s = 0.0

    def command(self) -> list[str]:
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.data_dir)}
        if _admin_off_supported():
            settings["admin.listeners"] = ""
        settings.update(self.overrides)
        cmd = [self.python, "-m", "strom.cli.main", "broker"]
        for k, v in settings.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 120.0) -> StromBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        logf = open(self.log_path, "ab")  # noqa: SIM115 (owned by the child)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        logf.close()
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if READY_MARK.encode() in f.read():
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"strom broker did not become ready:\n{tail}")
            time.sleep(0.02)
        self.ready_s = time.perf_counter() - t0
        return self

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class PeerBroker(Broker):
    kind = "peer"

    def __init__(self, script: Path) -> None:
        self.script = script
        self.port = free_port()
        self.log_path = Path(f"/tmp/strom-peer-tansu-{self.port}.log")

    def start(self) -> PeerBroker:
        out = subprocess.run(["bash", str(self.script), str(self.port)], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "STROM_PEER_LOG": str(self.log_path)})
        m = re.search(r"pid=(\d+) port=(\d+)", out.stdout)
        if out.returncode != 0 or m is None:
            raise RuntimeError(f"peer did not start: {out.stdout.strip()} {out.stderr.strip()}")
        self.pid, self.port = int(m.group(1)), int(m.group(2))
        # start-tansu.sh waits for "ready in"; make sure the port answers too
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        if not self.pid:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(self.pid, 0)
                time.sleep(0.05)
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.pid = 0

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --------------------------------------------------------------------------------------------------
# Running the bench


def bench_command(mode: str, bootstrap: str, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "strom.cli.main", "bench", mode, "--json", "-b", bootstrap, *args]


def run_bench(mode: str, broker: Broker, args: Sequence[str], timeout: float) -> dict[str, Any]:
    """One ``strom bench`` run as a subprocess, with the broker's CPU time and peak RSS during it."""
    cmd = bench_command(mode, broker.bootstrap, args)
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    with RssSampler(broker.pid) as rss:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"error": f"bench did not finish within {timeout:.0f} s", "command": cmd}
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(broker.pid) - cpu0
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": f"bench exit {proc.returncode}: {proc.stderr.strip()[-500:]}", "command": cmd}
    result["broker_cpu_s"] = round(cpu, 3)
    result["broker_rss_peak_mb"] = round(rss.peak / 2**20, 1)
    result["wall_s"] = round(wall, 3)
    result["exit_code"] = proc.returncode
    if proc.returncode != 0:
        result["stderr"] = proc.stderr.strip()[-500:]
    return result


# --------------------------------------------------------------------------------------------------
# Workloads


@dataclass
class Variant:
    label: str  # "strom", "peer", "strom acks=1", ...
    broker: str  # "strom" or "peer"
    args: list[str]
    strom_overrides: dict[str, str] = field(default_factory=dict)

    @property
    def broker_key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.broker, tuple(sorted(self.strom_overrides.items()))


@dataclass
class Ratio:
    """``numerator / denominator`` for ``figure``; the target is met when the median ratio is >= ``at_least``
    (or <= ``at_most``)."""

    numerator: str
    denominator: str
    figure: str
    at_least: float | None = None
    at_most: float | None = None


@dataclass
class Workload:
    name: str
    title: str
    mode: str  # produce | consume | e2e
    variants: list[Variant]
    figures: list[str]
    ratios: list[Ratio]
    fill: list[str] | None = None  # consume: produce these args into the topic first (not measured)
    absolute: list[tuple[str, str, float]] = field(default_factory=list)  # (label, figure, max) targets
    target: str = ""


FIGURES: dict[str, tuple[str, Callable[[dict[str, Any]], float | None]]] = {
    "records_per_s": ("records/s", lambda r: r["records_per_s"]),
    "mb_per_s": ("MB/s", lambda r: r["mb_per_s"]),
    "p50_ms": ("latency p50 ms", lambda r: (r.get("latency_ms") or {}).get("p50")),
    "p95_ms": ("latency p95 ms", lambda r: (r.get("latency_ms") or {}).get("p95")),
    "p99_ms": ("latency p99 ms", lambda r: (r.get("latency_ms") or {}).get("p99")),
    "p99_9_ms": ("latency p99.9 ms", lambda r: (r.get("latency_ms") or {}).get("p99_9")),
    "max_ms": ("latency max ms", lambda r: (r.get("latency_ms") or {}).get("max")),
    "broker_cpu_s": ("broker CPU s", lambda r: r["broker_cpu_s"]),
    "broker_cpu_per_gb": ("broker CPU s per GB", lambda r: r["broker_cpu_s"] / (r["bytes"] / 1e9)
                          if r["bytes"] else None),
    "broker_rss_peak_mb": ("broker RSS peak MB", lambda r: r["broker_rss_peak_mb"]),
    "client_cpu_s": ("bench client CPU s", lambda r: r.get("client_cpu_s")),
}
LATENCY_FIGURES = ["p50_ms", "p95_ms", "p99_ms", "p99_9_ms", "max_ms"]
COST = ["broker_cpu_s", "broker_cpu_per_gb", "broker_rss_peak_mb", "client_cpu_s"]


def _producer_args(records: int, size: int, acks: str, max_s: float, partitions: int = 3, linger: int = 5,
                   extra: Iterable[str] = ()) -> list[str]:
    return ["--records", str(records), "--record-size", str(size), "--partitions", str(partitions),
            "--acks", acks, "--linger-ms", str(linger), "--duration", f"{max_s:g}", "--timeout", "30", *extra]


def workloads(factor: float, max_s: float) -> dict[str, Workload]:
    def n(x: int) -> int:
        return max(100, int(x * factor))

    both = ("strom", "peer")
    out = [
        Workload(
            "produce-1k", "produce 1 KB records, acks=1, 3 partitions, linger 5 ms", "produce",
            [Variant(b, b, _producer_args(n(1_000_000), 1024, "1", max_s)) for b in both],
            ["mb_per_s", "records_per_s", *LATENCY_FIGURES, *COST],
            [Ratio("strom", "peer", "mb_per_s", at_least=1.0)],
            target="strom MB/s >= 1.0x peer"),
        Workload(
            "produce-100b", "produce 100 B records, acks=1, 3 partitions, linger 5 ms", "produce",
            [Variant(b, b, _producer_args(n(3_000_000), 100, "1", max_s)) for b in both],
            ["records_per_s", "mb_per_s", *LATENCY_FIGURES, *COST],
            [Ratio("strom", "peer", "records_per_s", at_least=0.9)],
            target="strom records/s >= 0.9x peer"),
        Workload(
            "consume-1k", "consume 1 KB records from the beginning, 3 partitions", "consume",
            [Variant(b, b, ["--records", str(n(1_000_000)), "--duration", f"{max_s:g}", "--timeout", "10"])
             for b in both],
            ["mb_per_s", "records_per_s", *COST],
            [Ratio("strom", "peer", "mb_per_s", at_least=1.0)],
            fill=_producer_args(n(1_000_000), 1024, "1", 600),
            target="strom >= 1.0x peer"),
        Workload(
            "consume-100b", "consume 100 B records from the beginning, 3 partitions", "consume",
            [Variant(b, b, ["--records", str(n(3_000_000)), "--duration", f"{max_s:g}", "--timeout", "10"])
             for b in both],
            ["records_per_s", "mb_per_s", *COST],
            [Ratio("strom", "peer", "records_per_s", at_least=1.0)],
            fill=_producer_args(n(3_000_000), 100, "1", 600),
            target="strom >= 1.0x peer"),
        Workload(
            "e2e", "end-to-end latency at 1000 records/s, 1 KB, acks=1, 3 partitions, "
                   "consumer fetch.wait.max.ms default (500)", "e2e",
            [Variant(b, b, _producer_args(n(15_000), 1024, "1", max_s, extra=["--target-rate", "1000"]))
             for b in both],
            [*LATENCY_FIGURES, "records_per_s"],
            [Ratio("strom", "peer", "p99_ms")],
            absolute=[("strom", "p99_ms", 10.0)],
            target="strom p99 <= 10 ms"),
        Workload(
            "acks-all", "produce 1 KB, acks=all; strom with log.flush.interval.messages=1 (fsync before every "
                        "ack) against strom acks=1 without it, and the peer (in memory) acks=all", "produce",
            [Variant("strom acks=all flush=1", "strom", _producer_args(n(400_000), 1024, "all", max_s),
                     {"log.flush.interval.messages": "1"}),
             Variant("peer acks=all", "peer", _producer_args(n(400_000), 1024, "all", max_s)),
             Variant("strom acks=1", "strom", _producer_args(n(400_000), 1024, "1", max_s))],
            ["mb_per_s", "records_per_s", *LATENCY_FIGURES, *COST],
            [Ratio("strom acks=all flush=1", "strom acks=1", "mb_per_s", at_least=0.5),
             Ratio("strom acks=all flush=1", "peer acks=all", "mb_per_s")],
            target="strom acks=all+flush within 2x of strom acks=1 (ratio >= 0.5)"),
    ]
    return {w.name: w for w in out}


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals), "n": len(vals)}


class Profiler:
    """py-spy record on the strom broker during each of its runs (raw collapsed stacks + an SVG)."""

    def __init__(self, outdir: Path | None, rate: int = 200) -> None:
        self.outdir = outdir
        self.rate = rate
        self.py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if outdir is not None:
            outdir.mkdir(parents=True, exist_ok=True)

    def start(self, broker: Broker, name: str) -> subprocess.Popen[bytes] | None:
        if self.outdir is None or broker.kind != "strom":
            return None
        raw = self.outdir / f"{name}.txt"
        return subprocess.Popen([self.py_spy, "record", "--pid", str(broker.pid), "--rate", str(self.rate),
                                 "--format", "raw", "--nonblocking", "-o", str(raw)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_workload(w: Workload, reps: int, max_s: float, peer_script: Path, workdir: Path,
                 profiler: Profiler) -> dict[str, Any]:
    brokers: dict[Any, Broker] = {}
    runs: dict[str, list[dict[str, Any]]] = {v.label: [] for v in w.variants}
    info: dict[str, Any] = {"title": w.title, "mode": w.mode, "target": w.target,
                            "commands": {}, "brokers": {}}
    timeout = max_s + 90.0
    try:
        for i, v in enumerate(w.variants):
            if v.broker_key in brokers:
                continue
            b: Broker
            if v.broker == "strom":
                b = StromBroker(v.strom_overrides, workdir / f"{w.name}-strom{i}")
            else:
                b = PeerBroker(peer_script)
            log(f"  starting {v.broker} broker {dict(v.strom_overrides) or ''}")
            brokers[v.broker_key] = b.start()
            info["brokers"][v.label] = {"kind": b.kind, "port": b.port, "overrides": v.strom_overrides,
                                        "pid": b.pid}
        if w.fill is not None:
            for v in w.variants:
                b = brokers[v.broker_key]
                log(f"  filling {w.name}-data on {v.label}")
                fill = run_bench("produce", b, ["--topic", f"{w.name}-data", *w.fill], timeout=900)
                if "error" in fill or not fill.get("ok"):
                    raise RuntimeError(f"fill failed on {v.label}: {fill.get('error') or fill.get('records')}")
                info.setdefault("fill", {})[v.label] = {k: fill[k] for k in ("records", "bytes", "elapsed_s")}
        for rep in range(reps):
            for v in w.variants:
                b = brokers[v.broker_key]
                if not b.alive():
                    runs[v.label].append({"error": f"broker died: {b.log_tail()}"})
                    continue
                topic = f"{w.name}-data" if w.fill is not None else f"{w.name}-{rep}"
                args = ["--topic", topic, *v.args]
                info["commands"][v.label] = "strom bench " + " ".join([w.mode, "--json", "-b",
                                                                        "<bootstrap>", *args])
                prof = profiler.start(b, f"{w.name}-{v.label.replace(' ', '_')}-{rep}")
                result = run_bench(w.mode, b, args, timeout)
                Profiler.stop(prof)
                result["repetition"] = rep
                runs[v.label].append(result)
                log(f"  {w.name} rep {rep + 1}/{reps} {v.label:<24} {short(result)}")
                if not b.alive():
                    result["broker_died"] = b.log_tail()
    finally:
        for b in brokers.values():
            b.stop()
        for b in brokers.values():
            if isinstance(b, StromBroker):
                shutil.rmtree(b.data_dir, ignore_errors=True)

    figures: dict[str, Any] = {}
    for fig in w.figures:
        _, get = FIGURES[fig]
        entry: dict[str, Any] = {}
        for v in w.variants:
            entry[v.label] = spread([_get(get, r) for r in runs[v.label]])
        for ratio in w.ratios:
            pairs = zip(runs[ratio.numerator], runs[ratio.denominator], strict=False)
            values = [(_get(get, a), _get(get, b)) for a, b in pairs]
            entry[f"ratio {ratio.numerator} / {ratio.denominator}"] = spread(
                [x / y for x, y in values if x is not None and y])
        figures[fig] = entry
    targets = []
    for ratio in w.ratios:
        if ratio.at_least is None and ratio.at_most is None:
            continue
        s = figures[ratio.figure].get(f"ratio {ratio.numerator} / {ratio.denominator}")
        med = s["median"] if s else None
        met = med is not None and (ratio.at_least is None or med >= ratio.at_least) \
            and (ratio.at_most is None or med <= ratio.at_most)
        bound = f">= {ratio.at_least}" if ratio.at_least is not None else f"<= {ratio.at_most}"
        targets.append({"what": f"{FIGURES[ratio.figure][0]} {ratio.numerator} / {ratio.denominator} {bound}",
                        "median": med, "met": met})
    for label, fig, limit in w.absolute:
        s = figures[fig].get(label)
        med = s["median"] if s else None
        targets.append({"what": f"{label} {FIGURES[fig][0]} <= {limit}", "median": med,
                        "met": med is not None and med <= limit})
    counts = {label: [_counts(r) for r in rs] for label, rs in runs.items()}
    return {**info, "figures": figures, "targets": targets, "counts": counts, "runs": runs}


def _get(get: Callable[[dict[str, Any]], float | None], r: dict[str, Any]) -> float | None:
    if "error" in r:
        return None
    try:
        return get(r)
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def _counts(r: dict[str, Any]) -> dict[str, Any]:
    if "error" in r:
        return {"error": r["error"]}
    return {**r["records"], "ok": r["ok"], "errors": r["errors"], "stopped": r["stopped"]}


def short(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error'][:200]}"
    lat = r.get("latency_ms") or {}
    text = f"{r['records_per_s']:>12,.0f} rec/s {r['mb_per_s']:>8.2f} MB/s"
    if lat:
        text += f"  p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} ms"
    text += f"  cpu {r['broker_cpu_s']:.1f}s rss {r['broker_rss_peak_mb']:.0f}MB"
    if not r.get("ok"):
        text += f"  NOT OK {r['records']} {r['errors']} stopped={r['stopped']}"
    elif r.get("stopped"):
        text += f"  (stopped: {r['stopped']})"
    return text


# --------------------------------------------------------------------------------------------------
# Scale: 1,000 partitions, 200 client connections, RSS, restart time


SCALE_CLIENT = r'''
import json, sys, time
from confluent_kafka import Producer
bootstrap, topic, clients, per_client, partitions, size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
hold = float(sys.argv[7])
counts = {"sent": 0, "acknowledged": 0, "failed": 0, "errors": {}}
def cb(err, msg):
    if err is None:
        counts["acknowledged"] += 1
    else:
        counts["failed"] += 1
        counts["errors"][err.name()] = counts["errors"].get(err.name(), 0) + 1
ps = [Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1", "on_delivery": cb,
                "client.id": f"scale-{i}", "message.timeout.ms": 60000}) for i in range(clients)]
for p in ps:
    p.list_topics(topic, timeout=30)
print("connected", flush=True)
value = b"x" * size
for k in range(per_client):
    for i, p in enumerate(ps):
        part = (i * per_client + k) % partitions
        while True:
            try:
                p.produce(topic, value, partition=part)
                break
            except BufferError:
                p.poll(0.01)
        counts["sent"] += 1
    if k % 10 == 0:
        for p in ps:
            p.poll(0)
for p in ps:
    p.flush(60)
time.sleep(hold)
print(json.dumps(counts), flush=True)
'''


def run_scale(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    partitions, clients, procs = args.scale_partitions, args.scale_clients, args.scale_processes
    per_client = args.scale_records_per_client
    out: dict[str, Any] = {"partitions": partitions, "clients": clients, "records_per_client": per_client}
    targets: list[dict[str, Any]] = []
    for kind in ("strom", "peer"):
        log(f"scale: {kind}")
        b: Broker = (StromBroker({"num.partitions": "1"}, workdir / "scale-strom") if kind == "strom"
                     else PeerBroker(args.peer_script))
        res: dict[str, Any] = {}
        try:
            b.start()
            res["rss_idle_mb"] = round(rss_bytes(b.pid) / 2**20, 1)
            t0 = time.perf_counter()
            r = subprocess.run(bench_command("produce", b.bootstrap, [
                "--topic", "scale", "--partitions", str(partitions), "--records", str(partitions * 10),
                "--record-size", "100", "--acks", "1", "--timeout", "60"]),
                capture_output=True, text=True, timeout=600, cwd=ROOT)
            res["create_and_fill_s"] = round(time.perf_counter() - t0, 2)
            seed = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"error": r.stderr[-500:]}
            res["seed"] = _counts(seed)
            res["rss_after_create_mb"] = round(rss_bytes(b.pid) / 2**20, 1)
            each = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
            rss = RssSampler(b.pid)  # the peak covers the produce and the consume phase
            rss.__enter__()
            children = [subprocess.Popen([sys.executable, "-c", SCALE_CLIENT, b.bootstrap, "scale", str(c),
                                          str(per_client), str(partitions), "100", "3"],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                        for c in each if c]
            peak_conn = 0
            t0 = time.perf_counter()
            while any(c.poll() is None for c in children) and time.perf_counter() - t0 < 600:
                peak_conn = max(peak_conn, established_connections(b.port))
                time.sleep(0.2)
            results = []
            for c in children:
                try:
                    stdout, stderr = c.communicate(timeout=max(1.0, 600 - (time.perf_counter() - t0)))
                except subprocess.TimeoutExpired:
                    c.kill()
                    stdout, stderr = c.communicate()
                lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
                results.append(json.loads(lines[-1]) if lines else {"error": stderr[-500:]})
            res["produce_s"] = round(time.perf_counter() - t0, 2)
            res["peak_connections"] = peak_conn
            res["clients"] = {
                "sent": sum(x.get("sent", 0) for x in results),
                "acknowledged": sum(x.get("acknowledged", 0) for x in results),
                "failed": sum(x.get("failed", 0) for x in results),
                "errors": [x.get("errors") or x.get("error") for x in results if x.get("errors") or x.get("error")],
            }
            expected = partitions * 10 + res["clients"]["acknowledged"]
            r = subprocess.run(bench_command("consume", b.bootstrap, [
                "--topic", "scale", "--records", str(expected), "--timeout", "20", "--duration", "300"]),
                capture_output=True, text=True, timeout=600, cwd=ROOT)
            cons = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"error": r.stderr[-500:]}
            res["consume"] = {**_counts(cons), "expected": expected,
                              "records_per_s": cons.get("records_per_s")}
            rss.__exit__()
            res["rss_peak_mb"] = round(rss.peak / 2**20, 1)
            res["rss_end_mb"] = round(rss_bytes(b.pid) / 2**20, 1)
            res["broker_alive"] = b.alive()
            if isinstance(b, StromBroker):
                res["log_bytes"] = _du(b.data_dir)
                b.stop()
                b.start()
                res["restart_ready_s"] = round(b.ready_s, 3)
        except Exception as e:  # report, do not hide
            res["error"] = f"{type(e).__name__}: {e}"
            res["log_tail"] = b.log_tail()
        finally:
            b.stop()
            if isinstance(b, StromBroker):
                shutil.rmtree(b.data_dir, ignore_errors=True)
        out[kind] = res
        log(f"  {kind}: {json.dumps({k: v for k, v in res.items() if k != 'log_tail'})}")
    s = out.get("strom", {})
    ok = (s.get("clients", {}).get("failed") == 0 and s.get("clients", {}).get("acknowledged") == clients * per_client
          and s.get("consume", {}).get("received") == s.get("consume", {}).get("expected"))
    targets.append({"what": f"{partitions} partitions, {clients} clients, no errors, every record read back",
                    "met": bool(ok)})
    targets.append({"what": "strom RSS peak < 300 MB", "median": s.get("rss_peak_mb"),
                    "met": s.get("rss_peak_mb") is not None and s["rss_peak_mb"] < 300})
    if args.restart_gb > 0:
        out["restart"] = run_restart(args, workdir)
        targets.append({"what": f"strom restart after a clean stop with {args.restart_gb:g} GB of log < 5 s",
                        "median": out["restart"].get("restart_ready_s"),
                        "met": (out["restart"].get("restart_ready_s") or 99) < 5})
    out["targets"] = targets
    return out


def run_restart(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Fill strom with ``--restart-gb`` GB of 1 KB records, stop it cleanly and time the next start."""
    b = StromBroker({"log.segment.bytes": str(1 << 30)}, workdir / "restart-strom")
    res: dict[str, Any] = {"gb": args.restart_gb}
    try:
        b.start()
        records = int(args.restart_gb * 1e9 / 1024)
        t0 = time.perf_counter()
        r = run_bench("produce", b, ["--topic", "restart", "--partitions", "3", "--records", str(records),
                                     "--record-size", "1024", "--acks", "1", "--linger-ms", "20",
                                     "--timeout", "60"], timeout=3600)
        res["fill_s"] = round(time.perf_counter() - t0, 1)
        res["fill"] = _counts(r)
        res["log_bytes"] = _du(b.data_dir)
        t0 = time.perf_counter()
        b.stop()
        res["stop_s"] = round(time.perf_counter() - t0, 2)
        b.start()
        res["restart_ready_s"] = round(b.ready_s, 3)
        res["rss_after_restart_mb"] = round(rss_bytes(b.pid) / 2**20, 1)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["log_tail"] = b.log_tail()
    finally:
        b.stop()
        shutil.rmtree(b.data_dir, ignore_errors=True)
    log(f"  restart: {json.dumps({k: v for k, v in res.items() if k != 'log_tail'})}")
    return res


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------------
# Output


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["memory_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    try:
        import confluent_kafka

        info["librdkafka"] = confluent_kafka.libversion()[0]
        version = confluent_kafka.version()
        info["confluent_kafka"] = version if isinstance(version, str) else version[0]
    except ImportError:
        pass
    return info


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_spread(s: dict[str, float] | None) -> str:
    if not s:
        return "-"
    return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(160, shutil.get_terminal_size((160, 24)).columns))
    m = report["machine"]
    console.print(f"machine: {m.get('cpus')} cores, {m.get('cpu', '?')}, {m.get('memory_gb')} GB, "
                  f"Python {m.get('python')}, librdkafka {m.get('librdkafka')}; load at start "
                  f"{' '.join(m.get('loadavg_at_start', []))}", highlight=False)
    console.print(f"command: {report['command']}", highlight=False, markup=False)
    console.print("cells: median (min-max) over the repetitions; ratios are per repetition pair", highlight=False)
    for name, w in report["workloads"].items():
        console.print()
        if "error" in w:
            console.print(f"[bold]{name}[/]: ERROR {w['error']}")
            continue
        labels = list(w["counts"].keys())
        table = Table(title=f"{name}: {w['title']}", title_justify="left", show_lines=False)
        table.add_column("figure")
        for label in labels:
            table.add_column(label, justify="right")
        ratio_cols = sorted({k for f in w["figures"].values() for k in f if k.startswith("ratio ")})
        for rc in ratio_cols:
            table.add_column(rc, justify="right")
        for fig, entry in w["figures"].items():
            table.add_row(FIGURES[fig][0], *[fmt_spread(entry.get(label)) for label in labels],
                          *[fmt_spread(entry.get(rc)) for rc in ratio_cols])
        console.print(table)
        for label, counts in w["counts"].items():
            bad = [c for c in counts if "error" in c or not c.get("ok")]
            if bad:
                console.print(f"  [red]{label}: {len(bad)} run(s) not OK:[/] {bad}", markup=True, highlight=False)
        for t in w["targets"]:
            mark = "[green]met[/]" if t["met"] else "[red]missed[/]"
            console.print(f"  target {t['what']}: median {fmt(t.get('median'))} {mark}", highlight=False)
    if "scale" in report:
        print_scale(report["scale"], console)


def print_scale(sc: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    console.print()
    table = Table(title=f"scale: {sc['partitions']} partitions, {sc['clients']} producer connections x "
                        f"{sc['records_per_client']} records of 100 B, then one consumer reads everything",
                  title_justify="left")
    table.add_column("figure")
    kinds = [k for k in ("strom", "peer") if k in sc]
    for k in kinds:
        table.add_column(k, justify="right")
    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("create topic + 10 records/partition, s", lambda r: r.get("create_and_fill_s")),
        ("peak established connections", lambda r: r.get("peak_connections")),
        ("records acknowledged / sent", lambda r: "{}/{}".format(r.get("clients", {}).get("acknowledged"),
                                                               r.get("clients", {}).get("sent"))),
        ("failed deliveries", lambda r: r.get("clients", {}).get("failed")),
        ("records read back / expected", lambda r: "{}/{}".format(r.get("consume", {}).get("received"),
                                                                r.get("consume", {}).get("expected"))),
        ("produce phase, s", lambda r: r.get("produce_s")),
        ("consume records/s", lambda r: fmt(r.get("consume", {}).get("records_per_s"))),
        ("RSS idle MB", lambda r: r.get("rss_idle_mb")),
        ("RSS after creating the topic MB", lambda r: r.get("rss_after_create_mb")),
        ("RSS peak (clients producing, then consuming) MB", lambda r: r.get("rss_peak_mb")),
        ("RSS at the end MB", lambda r: r.get("rss_end_mb")),
        ("restart after clean stop, s", lambda r: r.get("restart_ready_s")),
        ("error", lambda r: r.get("error")),
    ]
    for name, get in rows:
        table.add_row(name, *[str(get(sc[k])) if get(sc[k]) is not None else "-" for k in kinds])
    console.print(table)
    if "restart" in sc:
        r = sc["restart"]
        console.print(f"restart: {r.get('log_bytes', 0) / 1e9:.2f} GB of log written in {r.get('fill_s')} s "
                      f"({r.get('fill', {}).get('acknowledged')} records), clean stop {r.get('stop_s')} s, "
                      f"ready again after {r.get('restart_ready_s')} s, RSS {r.get('rss_after_restart_mb')} MB"
                      + (f"; ERROR {r['error']}" if r.get("error") else ""), highlight=False)
    for t in sc.get("targets", []):
        mark = "[green]met[/]" if t["met"] else "[red]missed[/]"
        console.print(f"  target {t['what']}: {fmt(t.get('median')) if 'median' in t else ''} {mark}",
                      highlight=False)


def markdown_report(report: dict[str, Any]) -> str:
    """The tables as Markdown (for docs/performance.md)."""
    out: list[str] = []
    for name, w in report["workloads"].items():
        if "error" in w:
            out.append(f"**{name}**: ERROR {w['error']}\n")
            continue
        labels = list(w["counts"].keys())
        ratio_cols = sorted({k for f in w["figures"].values() for k in f if k.startswith("ratio ")})
        out.append(f"**{name}**: {w['title']}\n")
        out.append("| figure | " + " | ".join([*labels, *ratio_cols]) + " |")
        out.append("|---|" + "---:|" * (len(labels) + len(ratio_cols)))
        for fig, entry in w["figures"].items():
            cells = [fmt_spread(entry.get(c)) for c in [*labels, *ratio_cols]]
            out.append(f"| {FIGURES[fig][0]} | " + " | ".join(cells) + " |")
        bad = {label: sum(1 for c in counts if "error" in c or not c.get("ok")) for label, counts in w["counts"].items()}
        out.append("")
        out.append("Every run counted every record: " + ("yes" if not any(bad.values()) else f"no {bad}") + ". "
                   + " ".join(f"Target {t['what']}: median {fmt(t.get('median'))}, "
                              f"{'met' if t['met'] else 'missed'}." for t in w["targets"]))
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = list(workloads(1.0, 20).keys())
    p.add_argument("-w", "--workload", action="append", choices=[*names, "scale"],
                   help="Workload to run (repeatable; default: all but scale).")
    p.add_argument("-n", "--repetitions", type=int, default=3, help="A B A B repetitions (default 3).")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="Stop sending/reading after this long in one repetition (default 20).")
    p.add_argument("--records-factor", type=float, default=1.0,
                   help="Scale every workload's record count (0.1 for a quick run).")
    p.add_argument("--peer-script", type=Path, default=DEFAULT_PEER_SCRIPT)
    p.add_argument("--json", action="store_true", help="Print the full report as JSON on stdout.")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy record the strom broker during its runs into DIR (raw collapsed stacks).")
    p.add_argument("--workdir", type=Path, default=None, help="Where strom's log directories go (default: a temp dir).")
    p.add_argument("--scale-partitions", type=int, default=1000)
    p.add_argument("--scale-clients", type=int, default=200)
    p.add_argument("--scale-processes", type=int, default=4, help="Client processes sharing the connections.")
    p.add_argument("--scale-records-per-client", type=int, default=500)
    p.add_argument("--restart-gb", type=float, default=1.0,
                   help="scale: GB of log to write before timing a restart (0: skip; issue target: 10).")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="Print the tables of a report saved with --json, and run nothing.")
    p.add_argument("--markdown", action="store_true", help="With --report: the tables as Markdown.")
    args = p.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        if args.markdown:
            print(markdown_report(saved))
        else:
            print_report(saved)
        return 0
    chosen = args.workload or names
    all_w = workloads(args.records_factor, args.max_seconds)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="strom-compare-"))
    profiler = Profiler(args.profile)
    report: dict[str, Any] = {"machine": machine(), "command": " ".join(["benchmarks/compare.py", *(argv or sys.argv[1:])]),
                              "repetitions": args.repetitions, "max_seconds": args.max_seconds,
                              "records_factor": args.records_factor, "workloads": {}}
    try:
        for name in chosen:
            if name == "scale":
                report["scale"] = run_scale(args, workdir)
                continue
            log(f"workload {name}")
            try:
                report["workloads"][name] = run_workload(all_w[name], args.repetitions, args.max_seconds,
                                                         args.peer_script, workdir, profiler)
            except Exception as e:
                report["workloads"][name] = {"error": f"{type(e).__name__}: {e}"}
                log(f"  ERROR {e}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
