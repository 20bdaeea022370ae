"""Compaction on a live broker: a compacted topic read from the beginning after cleaning holds exactly the
latest value of each live key, at its original offset, in offset order (plain, compressed and idempotent
batches, tombstones removed after delete.retention.ms); the same after a SIGKILL at each step of the
cleaner's swap; __consumer_offsets is compacted and groups' committed offsets stay right; transaction
markers go once their transaction's records are gone and delete.retention.ms has passed."""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, confluent_produce, create_topics, wait_until

from strom.records.codec import read_all
from strom.storage.cleaner import CRASH_POINT_CONFIG, CRASH_POINTS
from strom.storage.log import LogConfig, PartitionLog

pytestmark = pytest.mark.timeout(120)

FAST = {"log.cleaner.backoff.ms": "200", "log.retention.check.interval.ms": "500",
        "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "1000", "segment.ms": "1000"}

Expected = dict[int, tuple[bytes, bytes | None]]  # offset -> (key, value) of every record that must remain


def produce_history(bs: str, topic: str, keys: int = 40, updates: int = 20, seed: int = 7,
                    codecs: tuple[str, str] = ("gzip", "zstd")) -> tuple[Expected, Expected]:
    """Many updates per key through three producers (no compression, ``codecs[0]``, idempotent with
    ``codecs[1]``), tombstones
    for some keys (one of them set again afterwards), then a sentinel once segment.ms has passed, so
    that everything else is in closed segments. Returns (every record by offset, the survivors)."""
    rng = random.Random(seed)
    writes: list[tuple[bytes, bytes | None]] = [
        (b"key-%03d" % k, b"value-%03d-%03d" % (k, u) + b"." * rng.randrange(0, 60))
        for u in range(updates) for k in range(keys)
    ]
    rng.shuffle(writes)
    dead = [b"key-%03d" % k for k in range(0, keys, 5)]
    writes += [(k, None) for k in dead]
    writes.append((dead[0], b"back from the dead"))
    third = len(writes) // 3
    chunks = [(writes[:third], {}), (writes[third : 2 * third], {"compression.type": codecs[0]}),
              (writes[2 * third :], {"compression.type": codecs[1], "enable.idempotence": True})]
    everything: Expected = {}
    for chunk, conf in chunks:
        delivered = confluent_produce(bs, topic, [{"key": k, "value": v, "partition": 0} for k, v in chunk],
                                      {"linger.ms": 20, **conf})
        for d in delivered:
            everything[d.offset] = (d.key or b"", d.value)
    time.sleep(1.2)  # past segment.ms: the sentinel rolls a new active segment
    (sentinel,) = confluent_produce(bs, topic, [{"key": b"sentinel", "value": b"end", "partition": 0}])
    everything[sentinel.offset] = (b"sentinel", b"end")
    latest: dict[bytes, int] = {}
    for offset in sorted(everything):
        latest[everything[offset][0]] = offset
    survivors = {o: everything[o] for o in latest.values() if everything[o][1] is not None}
    return everything, survivors


def fetch_all(bs: str, topic: str) -> Expected:
    with RawConnection(bs) as conn:
        start = conn.list_offset(topic, 0, -2)[0]
        recs = conn.fetch_records(topic, 0, start)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets)), "offsets must increase"
    return {r.offset: (r.key or b"", r.value) for r in recs}


def wait_compacted(bs: str, topic: str, survivors: Expected, timeout: float = 40) -> None:
    state: dict[str, Any] = {}

    def done() -> bool:
        state["got"] = fetch_all(bs, topic)
        return state["got"] == survivors

    try:
        wait_until(done, timeout, interval=0.3, what=f"{topic} to be compacted")
    except AssertionError:
        got = state.get("got", {})
        raise AssertionError(f"{len(got)} records, {len(survivors)} expected; extra offsets "
                             f"{sorted(set(got) - set(survivors))[:20]}, missing {sorted(set(survivors) - set(got))[:20]}"
                             ) from None


def consume_confluent(bs: str, topic: str, count: int) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": f"cmp-{time.monotonic_ns()}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(500, 0.3):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
        out += [(m.offset(), m.key(), m.value()) for m in c.consume(100, 0.5) if m.error() is None]
    finally:
        c.close()
    return out


def consume_kafka_python(bs: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    from kafka import KafkaConsumer, TopicPartition

    kc = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        kc.assign([tp])
        kc.seek_to_beginning(tp)
        return [(m.offset, m.key, m.value) for m in kc]
    finally:
        kc.close()


def as_rows(expected: Expected) -> list[tuple[int, bytes, bytes | None]]:
    return [(o, k, v) for o, (k, v) in sorted(expected.items())]


def test_compacted_topic_keeps_latest_value_per_live_key(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(overrides=FAST)
    bs = b.bootstrap
    create_topics(bs, {"cmp": 1}, TOPIC_CONFIGS)
    everything, survivors = produce_history(bs, "cmp", codecs=("gzip", "gzip"))  # kafka-python has only gzip
    assert len(everything) > 800 and len(survivors) == 40 - 8 + 1 + 1
    wait_compacted(bs, "cmp", survivors)
    rows = as_rows(survivors)
    assert consume_confluent(bs, "cmp", len(rows)) == rows
    assert consume_kafka_python(bs, "cmp") == rows
    assert "cleaned cmp-0" in b.log_text()
    # ListOffsets by timestamp skips what compaction removed: the first survivor at or after the time.
    with RawConnection(bs) as conn:
        recs = conn.fetch_records("cmp", 0, 0)
        for target in (0, recs[len(recs) // 2].timestamp, recs[-1].timestamp):
            want = next(r for r in recs if r.timestamp >= target)
            assert conn.list_offset("cmp", 0, target) == (want.offset, want.timestamp)
    # Clean restart: the same records, and the log goes on at the same offsets.
    b.restart()
    assert fetch_all(b.bootstrap, "cmp") == survivors
    (more,) = confluent_produce(b.bootstrap, "cmp", [{"key": b"key-001", "value": b"newest", "partition": 0}])
    assert more.offset == max(everything) + 1


def partition_dir_state(part: Path) -> set[str]:
    return {p.name[21:] for p in part.iterdir() if p.name[:20].isdigit()}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_at_each_swap_step(broker_factory: Any, tmp_path: Path, point: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    b: BrokerProcess = broker_factory(overrides={**FAST, CRASH_POINT_CONFIG: point})
    bs = b.bootstrap
    # Not compacted while the history is written (the crash would cut it short): switched on after.
    create_topics(bs, {"crash": 1}, {**TOPIC_CONFIGS, "cleanup.policy": "delete", "retention.ms": "-1"})
    codecs = [("lz4", "zstd"), ("snappy", "lz4"), ("zstd", "snappy")][CRASH_POINTS.index(point) % 3]
    everything, survivors = produce_history(bs, "crash", keys=20, updates=15, seed=CRASH_POINTS.index(point),
                                            codecs=codecs)
    admin = AdminClient({"bootstrap.servers": bs})
    compact = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    futures = admin.incremental_alter_configs([ConfigResource("topic", "crash", incremental_configs=[compact])])
    with contextlib.suppress(Exception):  # the broker may die before it answers
        for f in futures.values():
            f.result(timeout=10)
    wait_until(lambda: b.proc is not None and b.proc.poll() is not None, 30, what=f"the crash at {point}")
    assert "TEST HOOK" in b.log_text()
    b.kill()  # reap it
    part = b.data_dir / "crash-0"
    state = partition_dir_state(part)
    leftovers = {"cleaned": "log.cleaned", "swap": "log.swap", "deleted-partial": "log.swap",
                 "deleted": "log.swap", "replaced": "log.deleted"}
    assert leftovers[point] in state, state

    # Recovery on a copy, in this process: a valid log holding the latest record of every key.
    copy = tmp_path / "copy" / "crash-0"
    shutil.copytree(part, copy)
    plog = PartitionLog.open(copy, "crash", 0, LogConfig(cleanup_policy="compact"))
    try:
        recs = []
        for seg in plog.segments():
            recs += read_all(seg.read(0, seg.size))
    finally:
        plog.close_handlers()
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets))
    for r in recs:
        assert everything[r.offset] == (r.key, r.value), r.offset
    got = {r.offset for r in recs}
    assert set(survivors) <= got
    last_written: dict[bytes, int] = {}
    for offset in sorted(everything):
        last_written[everything[offset][0]] = offset
    last_kept: dict[bytes, int] = {}
    for r in recs:
        last_kept[r.key or b""] = r.offset
    for key, offset in last_written.items():  # every key reads as its latest write (or a removed tombstone)
        assert last_kept.get(key, offset) == offset or everything[offset][1] is None, key
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in partition_dir_state(copy))

    # The broker recovers the same way and finishes the job.
    del b.overrides[CRASH_POINT_CONFIG]
    b.start()
    wait_compacted(b.bootstrap, "crash", survivors)


def test_consumer_offsets_compacted_and_offsets_kept(broker_factory: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    b: BrokerProcess = broker_factory(overrides={**FAST, "offsets.topic.segment.bytes": "2048",
                                                 "log.cleaner.min.cleanable.ratio": "0.01",
                                                 "log.cleaner.delete.retention.ms": "500"})
    create_topics(b.bootstrap, {"data": 3})

    def commit_many(group: str, rounds: int) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        last = {}
        try:
            for i in range(rounds):
                p = i % 3
                last[p] = i + 1
                c.commit(offsets=[TopicPartition("data", p, i + 1)], asynchronous=False)
        finally:
            c.close()
        return last

    def committed(bootstrap: str, group: str) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            return {tp.partition: tp.offset for tp in c.committed([TopicPartition("data", p) for p in range(3)],
                                                                    timeout=10)}
        finally:
            c.close()

    want = commit_many("keeper", 300)
    commit_many("goner", 60)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.delete_consumer_groups(["goner"], request_timeout=15).values():
        f.result(timeout=20)
    part = b.data_dir / "__consumer_offsets-0"

    def records_on_disk() -> list[Any]:
        out = []
        for p in sorted(part.glob("*.log")):
            out += read_all(p.read_bytes())
        return out

    written = 300 + 60
    wait_until(lambda: "cleaned __consumer_offsets-0" in b.log_text(), 30, what="__consumer_offsets to be cleaned")
    wait_until(lambda: len(records_on_disk()) < written // 4, 30, what="__consumer_offsets to shrink")
    assert committed(b.bootstrap, "keeper") == want
    assert committed(b.bootstrap, "goner") == {0: -1001, 1: -1001, 2: -1001}
    # After a crash the coordinator replays the compacted log: the same offsets.
    b.kill()
    b.start()
    assert committed(b.bootstrap, "keeper") == want
    assert committed(b.bootstrap, "goner") == {0: -1001, 1: -1001, 2: -1001}


def test_transaction_markers_removed_after_their_data_and_delete_retention(broker_factory: Any) -> None:
    """A compacted topic written in transactions: once a transaction's records are all compacted
    away (superseded or aborted), its marker is kept for delete.retention.ms more and then removed;
    the marker of a transaction whose records are live stays. read_committed readers (confluent-kafka)
    get the same values throughout, and no aborted record comes back."""
    from txn_helpers import confluent_values, txn_producer

    from strom.records import batch as rb

    b: BrokerProcess = broker_factory(overrides=FAST)
    bs = b.bootstrap
    topic = "txn-cmp"
    create_topics(bs, {topic: 1}, TOPIC_CONFIGS)
    producer = txn_producer(bs, "cmp-writer")
    for round_, commit in (("first", True), ("aborted", False), ("live", True)):
        producer.begin_transaction()
        for k in range(5):
            producer.produce(topic, key=b"k%d" % k, value=b"%s-%d" % (round_.encode(), k), partition=0)
        assert producer.flush(10) == 0
        producer.commit_transaction(20) if commit else producer.abort_transaction(20)

    def control_batches() -> list[int]:
        with RawConnection(bs) as conn:
            start = conn.list_offset(topic, 0, -2)[0]
            data = bytes(conn.fetch(topic, 0, start).records or b"")
        return [h.base_offset for h in rb.iter_batches(data) if h.is_control]

    first_markers = control_batches()
    assert len(first_markers) == 3
    ticks: list[bytes] = []

    def only_the_live_marker_left() -> bool:
        # New data now and then: segments roll (segment.ms 1 s) and the cleaner has dirty data to clean.
        ticks.append(b"tick-%d" % len(ticks))
        confluent_produce(bs, topic, [{"key": b"tick", "value": ticks[-1], "partition": 0}])
        return control_batches() == first_markers[2:]

    started = time.monotonic()
    wait_until(only_the_live_marker_left, 60, interval=0.5, what="the first two markers removed")
    # Not before delete.retention.ms: a marker waits one cleaning for its horizon, then 1 s.
    assert time.monotonic() - started > 1.0
    live = sorted(b"live-%d" % k for k in range(5))
    committed = confluent_values(bs, topic, 1, "read_committed")
    assert sorted(v for v in committed if not v.startswith(b"tick")) == live
    assert not any(v.startswith(b"aborted") for v in confluent_values(bs, topic, 1, "read_uncommitted"))
    part = Path(b.data_dir) / f"{topic}-0"
    assert sum(p.stat().st_size for p in part.glob("*.txnindex")) == 0  # the aborted transaction is gone
    b.restart()
    assert control_batches() == first_markers[2:]
    assert sorted(v for v in confluent_values(bs, topic, 1, "read_committed") if not v.startswith(b"tick")) == live
