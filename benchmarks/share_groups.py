#!/usr/bin/env python3
"""Records per second through ONE partition read by a share group (KIP-932) of 1, 3 and 8
confluent-kafka ShareConsumers, beside a consumer group on the same topic in the same run; and the
same with a per-record processing delay (5 ms by default), where a share group scales with its
members and a consumer group cannot go past one member per partition.

Method. One strom broker (strom.testing's EmbeddedBroker, Kafka's defaults but the share heartbeat
interval, 1 s). One topic of one partition holds --records records of 100 B, produced before any
consumer starts. Each run is a fresh group (share groups start at the log start through their group
config share.auto.offset.reset=earliest) of N consumer processes; every process is started and
imports its client first, then all are released at once. A ShareConsumer runs in implicit mode:
the records one poll() returned (up to max.poll.records) are ACCEPTed, in one batch, by its next
poll() (and the last ones by commit_sync()). The consumer group is one librdkafka Consumer
(consume() batches of max.poll.records, commit at the end). The rate is the records delivered divided
by the time from the first delivered record to the last (the group's join is left out); every
offset must be delivered, duplicates are counted (a share group delivers again only after a lock
runs out or a member dies, neither of which should happen here).

    .venv/bin/python benchmarks/share_groups.py                      # 200000 records; 3000 with 5 ms
    .venv/bin/python benchmarks/share_groups.py --records 50000 --delay-records 1200
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid
from typing import Any

from strom.testing import EmbeddedBroker

BROKER = {"group.share.min.heartbeat.interval.ms": "1000", "group.share.heartbeat.interval.ms": "1000",
          "group.initial.rebalance.delay.ms": "0"}
VALUE = b"x" * 100


def _worker(kind: str, bootstrap: str, group: str, topic: str, total: int, delay_s: float, max_poll: int,
            go: Any, delivered: Any, results: Any, deadline_s: float) -> None:
    from confluent_kafka import Consumer, ShareConsumer

    go.wait()
    offsets: list[int] = []
    first = last = 0.0
    if kind == "share":
        sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll})
        sc.subscribe([topic])
        poll = lambda: sc.poll(0.2)  # noqa: E731
    else:
        cc = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                       "enable.auto.commit": False})
        cc.subscribe([topic])
        poll = lambda: cc.consume(max_poll, 0.2)  # noqa: E731
    end = time.monotonic() + deadline_s
    while delivered.value < total and time.monotonic() < end:
        msgs = [m for m in poll() if m.error() is None]
        if not msgs:
            continue
        now = time.monotonic()
        first = first or now
        for m in msgs:
            if delay_s:
                time.sleep(delay_s)  # the job each record stands for
            offsets.append(m.offset())
        last = time.monotonic()
        with delivered.get_lock():
            delivered.value += len(msgs)
    if kind == "share":
        sc.commit_sync(15)
        sc.close()
    else:
        cc.commit(asynchronous=False) if offsets else None
        cc.close()
    results.put((first, last, offsets))


def run_one(bootstrap: str, topic: str, kind: str, members: int, total: int, delay_s: float, max_poll: int,
            timeout: float) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    group = f"bench-{kind}-{members}-{uuid.uuid4().hex[:6]}"
    if kind == "share":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(15)
    ctx = mp.get_context("spawn")
    go, delivered, results = ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, bootstrap, group, topic, total, delay_s, max_poll, go,
                                               delivered, results, timeout)) for _ in range(members)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every process import its client before the start  # noqa: TID251
    go.set()
    got = [results.get(timeout=timeout + 30) for _ in procs]
    for p in procs:
        p.join(30)
    firsts = [f for f, _, o in got if o]
    lasts = [la for _, la, o in got if o]
    offsets = [o for _, _, os_ in got for o in os_]
    elapsed = max(lasts) - min(firsts) if firsts else float("nan")
    return {"kind": kind, "members": members, "records": len(offsets), "distinct": len(set(offsets)),
            "missing": total - len(set(o for o in offsets if o < total)), "seconds": elapsed,
            "rate": len(set(offsets)) / elapsed if elapsed else 0.0,
            "per_member": sorted((len(o) for _, _, o in got), reverse=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--members", type=int, action="append", help="share group sizes (default 1, 3, 8)")
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--delay-records", type=int, default=3000)
    ap.add_argument("--delay-max-poll-records", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    sizes = args.members or [1, 3, 8]
    with EmbeddedBroker(BROKER, start_timeout=60) as broker:
        bs = broker.bootstrap_servers
        topic, slow_topic = f"share-bench-{uuid.uuid4().hex[:6]}", f"share-bench-slow-{uuid.uuid4().hex[:6]}"
        for t, n in ((topic, args.records), (slow_topic, args.delay_records)):
            broker.create_topic(t, partitions=1, timeout=60)
            _produce(bs, t, n)
        print(f"one partition, {args.records} records of {len(VALUE)} B, max.poll.records {args.max_poll_records}")
        rows = [run_one(bs, topic, "consumer", 1, args.records, 0.0, args.max_poll_records, args.timeout)]
        rows += [run_one(bs, topic, "share", n, args.records, 0.0, args.max_poll_records, args.timeout) for n in sizes]
        base = rows[0]["rate"]
        for r in rows:
            print(_line(r, base))
        print(f"\nwith {args.delay_ms:g} ms of work per record: {args.delay_records} records, "
              f"max.poll.records {args.delay_max_poll_records}")
        slow = [run_one(bs, slow_topic, "consumer", 1, args.delay_records, args.delay_ms / 1000,
                        args.delay_max_poll_records, args.timeout)]
        slow += [run_one(bs, slow_topic, "share", n, args.delay_records, args.delay_ms / 1000,
                         args.delay_max_poll_records, args.timeout) for n in (1, 3)]
        for r in slow:
            print(_line(r, slow[0]["rate"]))
        print(f"3 share consumers / 1 share consumer: {slow[2]['rate'] / slow[1]['rate']:.2f}x")
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")


def _produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000})
    for _ in range(n):
        p.produce(topic, VALUE, partition=0)
        p.poll(0)
    assert p.flush(60) == 0


def _line(r: dict[str, Any], base: float) -> str:
    what = "consumer group, 1 consumer " if r["kind"] == "consumer" else f"share group, {r['members']} consumers"
    dup = r["records"] - r["distinct"]
    return (f"  {what:<28} {r['rate']:>9.0f} records/s  ({r['rate'] / base:.2f}x)  {r['seconds']:.2f} s"
            f"  missing {r['missing']}  duplicates {dup}  per consumer {r['per_member']}")


if __name__ == "__main__":
    main()
