#!/usr/bin/env python3
"""The cost of TLS + SCRAM: `strom bench produce` and `consume` against one broker through its
PLAINTEXT listener and its SASL_SSL listener (SCRAM-SHA-512), alternating PLAINTEXT, SASL_SSL, ...
in one run, so both see the same machine. The certificates are made with Debian's openssl by the
commands docs/security.md gives.

    .venv/bin/python benchmarks/security_bench.py                  # 3 repetitions, 1 KB records
    .venv/bin/python benchmarks/security_bench.py -n 5 --records 500000 --record-size 100
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPENSSL = """
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 365 -subj "/CN=strom test CA"
openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj "/CN=localhost"
printf "subjectAltName=DNS:localhost,IP:127.0.0.1" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 -extfile server.ext -out server-cert.pem
cat server-key.pem server-cert.pem > server.pem
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def strom(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise SystemExit(f"strom {' '.join(args[:3])} failed: {r.stderr.strip()}")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--repetitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="strom-secbench-"))
    subprocess.run(["bash", "-ec", OPENSSL], cwd=work, check=True, capture_output=True)
    plain, secure = free_port(), free_port()
    broker = subprocess.Popen(
        [sys.executable, "-m", "strom.cli.main", "broker",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
         "--override", f"log.dirs={work / 'data'}", "--override", "admin.listeners=",
         "--override", "sasl.enabled.mechanisms=SCRAM-SHA-512", "--override", "ssl.keystore.type=PEM",
         "--override", f"ssl.keystore.location={work / 'server.pem'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert broker.stdout is not None
        for line in broker.stdout:
            if "ready: listening on" in line:
                break
        else:
            raise SystemExit("the broker did not start")
        strom("users", "add", "bench", "--password", "bench-secret", "-m", "SCRAM-SHA-512", "-b", f"127.0.0.1:{plain}")
        endpoints = {
            "PLAINTEXT": ["-b", f"127.0.0.1:{plain}"],
            "SASL_SSL+SCRAM": ["-b", f"127.0.0.1:{secure}", "-X", "security.protocol=SASL_SSL",
                               "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=bench",
                               "-X", "sasl.password=bench-secret", "-X", f"ssl.ca.location={work / 'ca.pem'}"],
        }
        figures: dict[str, dict[str, list[float]]] = {k: {"produce": [], "consume": []} for k in endpoints}
        for rep in range(args.repetitions):
            for name, conn in endpoints.items():
                topic = f"bench-{rep}-{name.split('+')[0].lower()}"
                p = json.loads(strom("bench", "produce", "--json", "--topic", topic, "--records", str(args.records),
                                     "--record-size", str(args.record_size), "--partitions", str(args.partitions),
                                     "--acks", "1", *conn).stdout)
                c = json.loads(strom("bench", "consume", "--json", "--topic", topic, "--records", str(args.records),
                                     *conn).stdout)
                assert p["ok"] and c["ok"], (p["errors"], c["errors"])
                figures[name]["produce"].append(p["mb_per_s"])
                figures[name]["consume"].append(c["mb_per_s"])
                print(f"rep {rep + 1} {name:15s} produce {p['mb_per_s']:7.1f} MB/s  consume {c['mb_per_s']:7.1f} MB/s",
                      flush=True)
        print(f"\n{args.records} records of {args.record_size} B, {args.partitions} partitions, acks=1, "
              f"{args.repetitions} repetitions (median, min-max); load average {os.getloadavg()[0]:.2f}")
        for workload in ("produce", "consume"):
            a, b = figures["PLAINTEXT"][workload], figures["SASL_SSL+SCRAM"][workload]
            ratios = [y / x for x, y in zip(a, b, strict=True)]
            print(f"{workload:8s} PLAINTEXT {statistics.median(a):7.1f} MB/s ({min(a):.1f}-{max(a):.1f})  "
                  f"SASL_SSL+SCRAM {statistics.median(b):7.1f} MB/s ({min(b):.1f}-{max(b):.1f})  "
                  f"ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"({time.monotonic() - t0:.0f} s)")
