#!/usr/bin/env python3
"""Time CreateTopics for one large topic on a fresh strom broker, and how long another client waits
meanwhile.

Each repetition starts a broker on an empty temporary log directory, connects an AdminClient, starts
a second client that sends ApiVersions back to back (5 ms apart) on its own connection, creates the
topic and prints the time from the request to the answer and the slowest ApiVersions answer that
overlapped it (a broker that does the file work on its event loop answers nothing until it is done).

    .venv/bin/python benchmarks/create_topic.py                    # 1,000 partitions, 3 repetitions
    .venv/bin/python benchmarks/create_topic.py -p 5000 -n 1 --log-dirs 2
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_MARK = "ready: listening on"
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, api key, version, correlation id, no client id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data: Path, log_dirs: int) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    dirs = ",".join(str(data / f"d{i}") for i in range(log_dirs))
    cmd = [sys.executable, "-m", "strom.cli.main", "broker"]
    for k, v in {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": dirs,
                 "admin.listeners": "http://127.0.0.1:0"}.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = proc.stdout
    assert out is not None
    deadline = time.monotonic() + 30
    for line in out:
        if READY_MARK in line:
            threading.Thread(target=out.read, daemon=True).start()  # keep the pipe drained
            return proc, f"127.0.0.1:{port}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the broker did not start")


def probe(bootstrap: str, stop: threading.Event, samples: list[tuple[float, float]]) -> None:
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        while not stop.is_set():
            start = time.monotonic()
            sock.sendall(API_VERSIONS_V0)
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            sock.recv(size, socket.MSG_WAITALL)
            samples.append((start, time.monotonic()))
            time.sleep(0.005)


def run_once(partitions: int, log_dirs: int) -> tuple[float, float]:
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="strom-create-") as tmp:
        proc, bootstrap = start_broker(Path(tmp), log_dirs)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.list_topics(timeout=10)
            samples: list[tuple[float, float]] = []
            stop = threading.Event()
            prober = threading.Thread(target=probe, args=(bootstrap, stop, samples), daemon=True)
            prober.start()
            time.sleep(0.2)
            started = time.monotonic()
            admin.create_topics([NewTopic("big", partitions, 1)], request_timeout=300)["big"].result(timeout=300)
            took = time.monotonic() - started
            time.sleep(0.05)
            stop.set()
            prober.join(60)
            worst = max((e - s for s, e in samples if e >= started and s <= started + took), default=float("nan"))
            return took, worst
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", "--partitions", type=int, default=1000)
    parser.add_argument("-n", "--repetitions", type=int, default=3)
    parser.add_argument("--log-dirs", type=int, default=1, help="log.dirs entries (all on the same disk)")
    args = parser.parse_args()
    for i in range(args.repetitions):
        took, worst = run_once(args.partitions, args.log_dirs)
        print(f"run {i + 1}: create {args.partitions} partitions {took:.2f} s; "
              f"slowest ApiVersions meanwhile {worst * 1000:.0f} ms", flush=True)


if __name__ == "__main__":
    main()
