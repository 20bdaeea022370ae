#!/usr/bin/env python3
"""Time for a consumer group of N members over P partitions to become stable after one more member
joins, classic cooperative-sticky against the consumer protocol (KIP-848), one broker, same run; and
the longest pause of a partition that keeps its owner (strom.bench.rebalance says how each figure is
measured).

The broker is a real strom process (strom.testing's EmbeddedBroker) with Kafka's group defaults
(group.consumer.heartbeat.interval.ms 5000, session timeouts 45 s; offsets.topic.num.partitions 50)
except group.initial.rebalance.delay.ms=0, which only delays the first rebalance of an empty group:
the classic group's initial formation, before anything is measured. The clients use their defaults
(classic: heartbeat.interval.ms 3000, session.timeout.ms 45000) but for the protocol and the assignor.

    .venv/bin/python benchmarks/group_rebalance.py                          # 50+1 members, 1000 partitions
    .venv/bin/python benchmarks/group_rebalance.py --members 10 --partitions 200 --runs 3
    strom bench rebalance -b HOST:PORT ...                                  # the same against any broker
"""

from __future__ import annotations

import argparse
import json
import os

from strom.bench.rebalance import PROTOCOLS, run, summary_lines
from strom.testing import EmbeddedBroker

BROKER = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=5.0, help="records/s to each partition")
    ap.add_argument("--procs", type=int, default=8, help="worker processes for the members")
    ap.add_argument("--steady", type=float, default=5.0, help="seconds of steady consumption before the join")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--protocol", action="append", choices=PROTOCOLS)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--broker", action="append", default=[], metavar="KEY=VALUE", help="broker property")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    config = {**BROKER, **dict(kv.split("=", 1) for kv in args.broker)}
    with EmbeddedBroker(config, start_timeout=60) as broker:
        results = run(broker.bootstrap_servers, members=args.members, partitions=args.partitions, rate=args.rate,
                      procs=args.procs, steady_s=args.steady, timeout=args.timeout, runs=args.runs,
                      protocols=tuple(args.protocol or PROTOCOLS),
                      create_topic=lambda t, n: broker.create_topic(t, partitions=n, timeout=120))
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    for line in summary_lines(results):
        print(line)
    print(f"load average {os.getloadavg()[0]:.1f}; broker {config}")


if __name__ == "__main__":
    main()
