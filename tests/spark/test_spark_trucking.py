"""The trucking pipeline on a small seeded event set gives exactly the aggregates and alerts that a
plain-Python computation over the same events gives."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import consume_all, create_topic

from strom.demo.trucking import ALERTS_TOPIC, EVENTS_TOPIC, job
from strom.demo.trucking.simulator import Simulator, produce_events

WINDOW_MS = 60_000        # 1-minute tumbling windows
WATERMARK_MS = 30_000     # 30 s allowed lateness
MIN_VIOLATIONS = 3
START_MS = 1_795_000_000_000 + 12_345  # not on a window boundary


def expected_stats(events: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (window start, driver): what the job must write, computed without Spark.

    With one micro-batch of data followed by the no-data batch, every window whose end is at or
    before the final watermark (max event time - 30 s) is emitted, and no event is late."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        groups[(e["eventTime"] // WINDOW_MS * WINDOW_MS, e["driverId"])].append(e)
    watermark = max(e["eventTime"] for e in events) - WATERMARK_MS
    out = {}
    for (start, driver), es in groups.items():
        if start + WINDOW_MS > watermark:
            continue  # still open
        speeds = [e["speed"] for e in es]
        kinds = [e["eventType"] for e in es]
        out[(start, driver)] = {
            "driverName": es[0]["driverName"],
            "events": len(es),
            "violations": sum(k != "Normal" for k in kinds),
            "overspeed": kinds.count("Overspeed"),
            "laneDepartures": kinds.count("Lane Departure"),
            "unsafeFollowing": kinds.count("Unsafe following distance"),
            "avgSpeed": sum(speeds) / len(speeds),
            "maxSpeed": max(speeds),
        }
    return out


@pytest.mark.timeout(300)
def test_trucking_pipeline_matches_plain_python(spark: Any, registry_broker: Any, tmp_path: Path) -> None:
    assert (job.WINDOW_SECONDS * 1000, job.WATERMARK_SECONDS * 1000, job.ALERT_MIN_VIOLATIONS) == (
        WINDOW_MS, WATERMARK_MS, MIN_VIOLATIONS)
    b, url = registry_broker.bootstrap, registry_broker.registry_url
    create_topic(b, EVENTS_TOPIC, 3)
    create_topic(b, ALERTS_TOPIC, 1)
    events = Simulator(seed=42, trucks=6, start_ms=START_MS, mean_gap_ms=300).events(1500)
    watermark = max(e["eventTime"] for e in events) - WATERMARK_MS
    assert watermark % WINDOW_MS != 0  # no window ends exactly on the final watermark
    produce_events(b, EVENTS_TOPIC, events, url)  # Avro, by confluent-kafka's AvroSerializer
    # A value that is not Avro (a JSON event, as the demo once wrote) is dropped by the job, as the
    # reference ignores it.
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b})
    p.produce(EVENTS_TOPIC, value=json.dumps(events[0]).encode(), key=b"bad")
    assert p.flush(10) == 0

    want = expected_stats(events)
    want_alerts = {k: v for k, v in want.items() if v["violations"] >= MIN_VIOLATIONS}
    assert len(want) >= 30 and 3 <= len(want_alerts) < len(want)  # the seed gives a meaningful mix

    queries = job.start(spark, b, tmp_path / "out", tmp_path / "ck", registry_url=url, trigger={"availableNow": True},
                        source_options={"startingOffsets": "earliest"})
    for q in queries:
        q.awaitTermination(240)
        assert not q.isActive and q.exception() is None

    rows = spark.read.parquet(str(tmp_path / "out" / "driver_stats")).collect()
    got = {}
    for r in rows:
        start_ms = round(r.windowStart.timestamp() * 1000)
        assert round(r.windowEnd.timestamp() * 1000) == start_ms + WINDOW_MS
        key = (start_ms, r.driverId)
        assert key not in got  # each window once
        got[key] = {k: getattr(r, k) for k in ("driverName", "events", "violations", "overspeed", "laneDepartures",
                                               "unsafeFollowing", "avgSpeed", "maxSpeed")}
    assert got == want

    messages = consume_all(b, ALERTS_TOPIC, len(want_alerts), timeout=30)
    got_alerts = {}
    for m in messages:
        a = json.loads(m.value())
        assert m.key() == str(a["driverId"]).encode()
        assert a["windowEnd"] - a["windowStart"] == WINDOW_MS
        got_alerts[(a["windowStart"], a["driverId"])] = {k: a[k] for k in want_alerts[next(iter(want_alerts))]}
    assert got_alerts == want_alerts
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    # Nothing more than those alerts was written: read the whole topic to its end (the sink writes
    # in transactions, so the log also holds their commit markers, which no reader is given).
    c = Consumer({"bootstrap.servers": b, "group.id": "alerts-count", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(ALERTS_TOPIC, 0, OFFSET_BEGINNING)])
        records, at_end = 0, False
        deadline = time.monotonic() + 30
        while not at_end and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    records += 1
                elif m.error().code() == -191:  # _PARTITION_EOF
                    at_end = True
        assert at_end and records == len(want_alerts)
    finally:
        c.close()
