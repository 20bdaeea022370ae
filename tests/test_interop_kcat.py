"""Debian's kcat (librdkafka 2.0.x) against a real strom broker: auto-created topic, keyed and unkeyed produce
with headers, consume from the beginning, from an offset and from a timestamp, metadata listing."""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict

from helpers import RawConnection, java_partition

from strom.records import batch as rb

KCAT = "/usr/bin/kcat"
PARTITIONS = 3


def kcat(*args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def consume(bs: str, topic: str, *extra: str) -> list[dict]:
    out = kcat("-C", "-b", bs, "-t", topic, "-e", "-q", "-J", *extra)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_kcat_auto_create_produce_consume_seek(broker_factory) -> None:
    b = broker_factory(overrides={"num.partitions": str(PARTITIONS)})
    bs = b.bootstrap
    topic = "kcat-auto"
    murmur = ("-X", "topic.partitioner=murmur2_random")

    keyed = [(f"kcat-key-{i % 7}", f"keyed-{i}") for i in range(40)]
    kcat("-P", "-b", bs, "-t", topic, "-K", ":", "-H", "run=A", "-H", "kind=keyed", *murmur,
         stdin="".join(f"{k}:{v}\n" for k, v in keyed))
    unkeyed = [f"unkeyed-{i}" for i in range(20)]
    kcat("-P", "-b", bs, "-t", topic, "-H", "run=A", "-H", "kind=unkeyed",
         stdin="".join(f"{v}\n" for v in unkeyed))
    time.sleep(0.05)  # so the second run's timestamps are strictly later
    later = [(f"kcat-key-{i % 5}", f"later-{i}") for i in range(15)]
    kcat("-P", "-b", bs, "-t", topic, "-K", ":", "-H", "run=B", *murmur,
         stdin="".join(f"{k}:{v}\n" for k, v in later))

    # The topic was auto-created with the broker's num.partitions.
    md = json.loads(kcat("-L", "-b", bs, "-t", topic, "-J"))
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert len(t["partitions"]) == PARTITIONS
    assert md["brokers"][0]["name"].startswith("127.0.0.1:")

    msgs = consume(bs, topic, "-o", "beginning")
    assert len(msgs) == len(keyed) + len(unkeyed) + len(later)
    by_part: dict[int, list[dict]] = defaultdict(list)
    for m in msgs:
        by_part[m["partition"]].append(m)
    values_in_order = [v for _, v in keyed] + unkeyed + [v for _, v in later]
    for p, ms in by_part.items():
        # Offsets contiguous from 0, produce order kept within the partition, timestamps non-decreasing.
        assert [m["offset"] for m in ms] == list(range(len(ms)))
        vals = [m["payload"] for m in ms]
        assert vals == sorted(vals, key=values_in_order.index), f"partition {p} out of order"
        assert [m["ts"] for m in ms] == sorted(m["ts"] for m in ms)
    by_value = {m["payload"]: m for m in msgs}
    assert set(by_value) == set(values_in_order)
    now = time.time() * 1000
    for k, v in keyed:
        m = by_value[v]
        assert m["key"] == k
        assert m["partition"] == java_partition(k.encode(), PARTITIONS), m
        assert m["headers"] == ["run", "A", "kind", "keyed"]
        assert now - 120_000 < m["ts"] <= now + 1000
    for v in unkeyed:
        assert by_value[v]["key"] is None
        assert by_value[v]["headers"] == ["run", "A", "kind", "unkeyed"]
    for k, v in later:
        assert by_value[v]["key"] == k
        assert by_value[v]["partition"] == java_partition(k.encode(), PARTITIONS)
        assert by_value[v]["headers"] == ["run", "B"]

    # kcat (old librdkafka) produced record batch v2.
    with RawConnection(bs) as raw:
        data = bytes(raw.fetch(topic, 0, 0).records or b"")
        assert data and all(h.magic == 2 for h in rb.iter_batches(data))

    # From an offset in one partition.
    p = max(by_part, key=lambda q: len(by_part[q]))
    start = len(by_part[p]) // 2
    got = consume(bs, topic, "-p", str(p), "-o", str(start))
    assert [m["offset"] for m in got] == list(range(start, len(by_part[p])))
    assert [m["payload"] for m in got] == [m["payload"] for m in by_part[p][start:]]

    # From a timestamp: the first "later" record's time; every partition starts at its first record at/after it.
    target = min(by_value[v]["ts"] for _, v in later)
    got = consume(bs, topic, "-o", f"s@{target}")
    expected = sorted(m["payload"] for m in msgs if m["ts"] >= target)
    assert sorted(m["payload"] for m in got) == expected
    assert {v for _, v in later} <= set(expected)
    for q, ms in by_part.items():
        offsets = [m["offset"] for m in got if m["partition"] == q]
        first = [m["offset"] for m in ms if m["ts"] >= target]
        assert offsets == (list(range(first[0], len(ms))) if first else [])
