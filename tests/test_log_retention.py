"""Time and size retention on a live broker: old segments go (and only those), the log start offset
moves and is checkpointed, consumers below it get OFFSET_OUT_OF_RANGE and reset as configured."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, confluent_produce, create_topics, wait_until

from strom.records.batch import iter_batches
from strom.records.codec import read_all

pytestmark = pytest.mark.timeout(90)

FAST = {"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"}
OFFSET_OUT_OF_RANGE = 1


def segment_bases(part_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in part_dir.glob("*.log"))


def dir_records(part_dir: Path) -> list[Any]:
    out = []
    for p in sorted(part_dir.glob("*.log")):
        out += read_all(p.read_bytes())
    return out


def low_watermark(bootstrap: str, topic: str) -> int:
    with RawConnection(bootstrap) as conn:
        return conn.list_offset(topic, 0, -2)[0]


def produce_one_per_batch(bootstrap: str, topic: str, values: list[bytes], timestamp: int | None = None) -> list[int]:
    delivered = confluent_produce(
        bootstrap, topic, [{"value": v, "partition": 0, "timestamp": timestamp} for v in values],
        {"linger.ms": 0, "batch.num.messages": 1},
    )
    return [d.offset for d in delivered]


def consume_from(bootstrap: str, topic: str, offset: int, reset: str, expect: int, timeout: float = 15.0
                 ) -> tuple[list[Any], list[Any]]:
    """An assigned confluent-kafka consumer starting at ``offset``: (messages, errors)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ret-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": reset, "fetch.wait.max.ms": 100})
    msgs: list[Any] = []
    errors: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(msgs) < expect and not errors:
            for m in consumer.consume(100, 0.3):
                (errors if m.error() is not None else msgs).append(m.error() or m)
    finally:
        consumer.close()
    return msgs, errors


def test_retention_ms_deletes_old_segments_only(broker_factory: Any) -> None:
    from confluent_kafka import KafkaError

    b: BrokerProcess = broker_factory(overrides=FAST)
    bs = b.bootstrap
    # Five minutes: the old records (ten minutes old) are past it, the new ones (stamped now) stay
    # however slow the machine; the end of the test shortens it for them.
    create_topics(bs, {"ret": 1}, {"retention.ms": "300000", "segment.bytes": "1024"})
    part = b.data_dir / "ret-0"
    old = produce_one_per_batch(bs, "ret", [b"old-%03d" % i + b"x" * 100 for i in range(40)],
                                timestamp=int(time.time() * 1000) - 600_000)
    new_values = [b"new-%03d" % i + b"y" * 100 for i in range(40)]
    new = produce_one_per_batch(bs, "ret", new_values)
    assert old == list(range(40)) and new == list(range(40, 80))
    # The segment holding the first new record, and everything after it, must stay.
    keep_from = max(base for base in segment_bases(part) if base <= 40)
    assert keep_from > 0

    wait_until(lambda: low_watermark(bs, "ret") > 0, 15, what="retention to move the log start offset")
    assert low_watermark(bs, "ret") == keep_from
    assert segment_bases(part)[0] == keep_from
    recs = dir_records(part)
    assert [r.value for r in recs if r.offset >= 40] == new_values  # no new record lost
    assert all(r.offset >= keep_from for r in recs)
    checkpoint = b.data_dir / "log-start-offset-checkpoint"
    wait_until(lambda: checkpoint.exists() and f"ret 0 {keep_from}" in checkpoint.read_text().split("\n"), 10,
               what="the log start offset checkpoint")

    # Below the log start: OFFSET_OUT_OF_RANGE on the wire; clients reset as auto.offset.reset says.
    with RawConnection(bs) as conn:
        p = conn.fetch("ret", 0, 0)
        assert int(p.error_code) == OFFSET_OUT_OF_RANGE and p.log_start_offset == keep_from
        data = bytes(conn.fetch("ret", 0, keep_from).records or b"")
        assert iter_batches(data)[0].base_offset == keep_from
        # Fetch by timestamp finds the log start for a time before everything that is left.
        assert conn.list_offset("ret", 0, 0)[0] == keep_from
    msgs, errors = consume_from(bs, "ret", 0, "earliest", 80 - keep_from)
    assert not errors and [m.offset() for m in msgs] == list(range(keep_from, 80))
    msgs, errors = consume_from(bs, "ret", 0, "error", 1, timeout=10)
    assert not msgs and errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET
    msgs, errors = consume_from(bs, "ret", 0, "latest", 1, timeout=3)
    assert not msgs and not errors  # reset to the end: nothing new yet

    from kafka import KafkaConsumer, TopicPartition

    kc = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=5000)
    try:
        tp = TopicPartition("ret", 0)
        kc.assign([tp])
        kc.seek(tp, 3)
        got = [m.offset for m in kc]
    finally:
        kc.close()
    assert got == list(range(keep_from, 80))

    # A SIGKILL keeps the new log start (checkpoint and segment files agree).
    b.kill()
    b.start()
    assert low_watermark(b.bootstrap, "ret") == keep_from

    # A shorter retention.ms applies to what the log holds: the new records expire too, every
    # segment goes (the active one after a roll), offsets go on.
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, "ret", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # held: the future dies with its client
    admin.incremental_alter_configs([resource])[resource].result(20)
    wait_until(lambda: low_watermark(b.bootstrap, "ret") == 80, 20, what="the new records to expire")
    assert dir_records(part) == []
    assert produce_one_per_batch(b.bootstrap, "ret", [b"after"]) == [80]


def test_retention_bytes_keeps_log_under_bound(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(overrides=FAST)
    bs = b.bootstrap
    create_topics(bs, {"retb": 1}, {"retention.bytes": "4000", "segment.bytes": "1000"})
    part = b.data_dir / "retb-0"
    values = [b"%04d" % i + b"z" * 120 for i in range(120)]
    produce_one_per_batch(bs, "retb", values)

    def size() -> int:
        total = 0
        for p in part.glob("*.log"):
            with contextlib.suppress(FileNotFoundError):  # deleted by retention since the listing
                total += p.stat().st_size
        return total

    wait_until(lambda: size() <= 4000 + 1000, 15, what="retention.bytes to trim the log")
    assert size() >= 4000  # only as much as needed: the log stays at least retention.bytes
    start = low_watermark(bs, "retb")
    assert start == segment_bases(part)[0] > 0
    with RawConnection(bs) as conn:
        recs = conn.fetch_records("retb", 0, start)
    assert [r.value for r in recs] == values[start:]  # the newest records, contiguous to the end
