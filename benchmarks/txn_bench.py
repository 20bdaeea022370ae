#!/usr/bin/env python3
"""What transactions cost a producer: a transactional producer committing every N records against a
plain idempotent producer, same broker, same run, alternating.

Each run sends RECORDS records of SIZE bytes to a fresh topic of one broker (strom.testing's
EmbeddedBroker: a real broker process on 127.0.0.1) with confluent-kafka, acks=all, and waits for
the last acknowledgement (idempotent) or the last commit (transactional). Printed: records/s per
run, the medians, and the ratio transactional / idempotent.

    .venv/bin/python benchmarks/txn_bench.py                       # 100,000 x 1 KB, commit every 100, 3 runs each
    .venv/bin/python benchmarks/txn_bench.py -n 5 --records 50000 --every 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from confluent_kafka import Producer

from strom.testing import EmbeddedBroker


def run(bootstrap: str, topic: str, records: int, size: int, every: int | None) -> float:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    if every is not None:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    value = os.urandom(size)
    if every is not None:
        p.init_transactions(30)
        p.begin_transaction()  # the warm-up record below goes in a transaction of its own
    # Both connected and with the topic's metadata before the clock starts (init_transactions does
    # this for the transactional one; an idempotent producer would do it inside the timed part).
    p.list_topics(topic, timeout=10)
    p.produce(topic, b"warm-up")
    if every is not None:
        p.commit_transaction(10)
    p.flush(10)
    start = time.perf_counter()
    sent = 0
    while sent < records:
        if every is not None:
            p.begin_transaction()
        for _ in range(min(every or records, records - sent)):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.001)  # the local queue is full: serve deliveries (a longer wait idles the producer)
            sent += 1
        if every is not None:
            p.commit_transaction(60)  # flushes, then ends the transaction
    p.flush(60)
    return records / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--every", type=int, default=100, help="records per transaction")
    args = ap.parse_args()
    results: dict[str, list[float]] = {"idempotent": [], "transactional": []}
    with EmbeddedBroker({"num.partitions": "3"}) as broker:
        for i in range(args.runs):
            for kind in ("idempotent", "transactional"):
                topic = f"{kind}-{i}"
                broker.create_topic(topic, partitions=3)
                rate = run(broker.bootstrap_servers, topic, args.records, args.size,
                           args.every if kind == "transactional" else None)
                results[kind].append(rate)
                print(f"run {i + 1} {kind:13s} {rate:10,.0f} records/s  {rate * args.size / 1e6:7.1f} MB/s", flush=True)
    idem, txn = (statistics.median(results[k]) for k in ("idempotent", "transactional"))
    print(f"median: idempotent {idem:,.0f} records/s, transactional (commit every {args.every}) {txn:,.0f} records/s, "
          f"ratio {txn / idem:.2f}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
