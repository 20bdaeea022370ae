"""The log cleaner at the storage level: which records survive, tombstones and their delete horizon,
idempotent producers' last batches, compressed batches, the swap protocol and a crash at each of its
steps, timestamps and indexes across cleaned segments, the cleaner thread handing work to an owner, and
transactions: aborted records, markers and their delete horizon, the cleaned .txnindex."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from storage_helpers import append, read_everything

from strom.records.batch import iter_batches
from strom.records.codec import GZIP, LZ4, SNAPPY, ZSTD, Record, build_batch, read_all
from strom.records.filter import DELETE_HORIZON_MASK, delete_horizon
from strom.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CRASH_POINTS,
    CleanerConfig,
    LogCleaner,
    cleanable_info,
)
from strom.storage.log import LogConfig, PartitionLog
from strom.storage.log_manager import LogManager

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self, now: int = 10_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def compact_config(**kw: object) -> LogConfig:
    base: dict[str, object] = {"cleanup_policy": "compact", "segment_bytes": 600, "min_cleanable_dirty_ratio": 0.01,
                               "index_interval_bytes": 100, "delete_retention_ms": 1000}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def manager(tmp_path: Path, clock: Clock, **kw: object) -> tuple[LogManager, PartitionLog, LogCleaner]:
    lm = LogManager([tmp_path], compact_config(**kw), now_ms=clock)
    lm.startup()
    plog = lm.create_log("t", 0, uuid.uuid4())
    cleaner = LogCleaner(lm, lambda: CleanerConfig(backoff_ms=50), now_ms=clock)
    return lm, plog, cleaner


def put(plog: PartitionLog, clock: Clock, key: str, value: str | None, **kw: object) -> None:
    append(plog, build_batch([(key.encode(), None if value is None else value.encode())], timestamp_ms=clock.now,
                             **kw))  # type: ignore[arg-type]


def live(plog: PartitionLog) -> list[Record]:
    return read_all(read_everything(plog))


def latest_values(writes: list[tuple[str, str | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for k, v in writes:
        out[k.encode()] = None if v is None else v.encode()
    return out


def check_offsets(recs: list[Record]) -> None:
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets)), offsets


def test_keeps_latest_value_per_key_with_offsets(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock)
    writes = [(f"k{i % 7}", f"v{i}") for i in range(120)]
    for k, v in writes:
        put(plog, clock, k, v)
        clock.now += 1
    before = {r.offset: r for r in live(plog)}
    active_base = plog.active_segment.base_offset
    assert len(plog.segments()) > 5
    assert cleaner.clean_once()
    recs = live(plog)
    check_offsets(recs)
    for r in recs:  # offsets and contents unchanged
        assert before[r.offset] == r
    closed = [r for r in recs if r.offset < active_base]
    keys = [r.key for r in closed]
    assert len(keys) == len(set(keys))  # one record per key below the active segment
    latest = latest_values(writes)
    last_of = {r.key: r.value for r in recs}
    assert last_of == latest
    # Everything in the active segment is untouched.
    assert [r.offset for r in recs if r.offset >= active_base] == list(range(active_base, plog.log_end_offset))
    assert cleaner.first_dirty_offset(("t", 0)) == active_base
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[2] == f"t 0 {active_base}"
    assert not cleaner.clean_once()  # nothing dirty any more
    assert not list((tmp_path / "t-0").glob("*.cleaned")) and not list((tmp_path / "t-0").glob("*.swap"))


def test_reopen_after_cleaning_and_fetch_by_timestamp(tmp_path: Path) -> None:
    clock = Clock()
    lm, plog, cleaner = manager(tmp_path, clock)
    for i in range(100):
        put(plog, clock, f"k{i % 5}", f"v{i}")
        clock.now += 10
    first_ts = clock.now - 1000
    assert cleaner.clean_once()
    expected = live(plog)
    # Fetch by timestamp finds the first surviving record at or after the time.
    want = next(r for r in expected if r.timestamp >= first_ts)
    assert plog.offset_for_timestamp(first_ts) == (want.offset, want.timestamp)
    assert plog.offset_for_timestamp(0) == (expected[0].offset, expected[0].timestamp)
    # Reading from an offset inside a gap returns the next batch.
    gap = next(o for o in range(plog.log_end_offset) if o not in {r.offset for r in expected})
    assert iter_batches(plog.read(gap, 1 << 20))[0].base_offset > gap
    lm.shutdown()
    lm2 = LogManager([tmp_path], compact_config(), now_ms=clock)
    lm2.startup()
    plog2 = lm2.get_log("t", 0)
    assert plog2 is not None
    assert live(plog2) == expected
    assert plog2.offset_for_timestamp(first_ts) == (want.offset, want.timestamp)
    lm2.shutdown()


def test_tombstones_removed_after_delete_retention(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock, delete_retention_ms=5000)
    for i in range(60):
        put(plog, clock, f"k{i % 6}", f"v{i}")
    put(plog, clock, "k1", None)
    put(plog, clock, "k2", None)
    for i in range(30):
        put(plog, clock, f"x{i % 3}", f"w{i}")  # more data, so the tombstones are below the active segment
    assert cleaner.clean_once()
    recs = live(plog)
    tombstones = [r for r in recs if r.value is None]
    assert sorted(r.key for r in tombstones) == [b"k1", b"k2"]  # kept, with a delete horizon
    assert not any(r.key in (b"k1", b"k2") and r.value is not None for r in recs)
    horizons = {delete_horizon(h) for h in iter_batches(read_everything(plog)) if h.attributes & DELETE_HORIZON_MASK}
    assert horizons == {clock.now + 5000}
    # The record timestamps survive the new base timestamp.
    assert all(r.timestamp == clock.now for r in recs)
    clock.now += 4000
    cleaner.clean_once()
    assert sorted(r.key for r in live(plog) if r.value is None) == [b"k1", b"k2"]  # not yet
    clock.now += 2000
    assert cleaner.clean_once()  # cleanable because the horizon has passed, though nothing is dirty
    recs = live(plog)
    assert not any(r.key in (b"k1", b"k2") for r in recs)
    assert {r.key for r in recs} == {b"k0", b"k3", b"k4", b"k5", b"x0", b"x1", b"x2"}


def test_dirty_ratio_and_compaction_lags(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock, min_cleanable_dirty_ratio=0.9)
    for i in range(60):
        put(plog, clock, f"k{i}", "v")  # unique keys: compaction would remove nothing
    info = cleanable_info(plog, None, clock.now)
    assert info.dirty_bytes > 0 and info.ratio == 1.0
    assert cleaner.clean_once()
    for i in range(10):
        put(plog, clock, f"k{i}", "again")
    info = cleanable_info(plog, cleaner.first_dirty_offset(("t", 0)), clock.now)
    assert 0 < info.ratio < 0.9
    assert not cleaner.clean_once()  # below min.cleanable.dirty.ratio
    # max.compaction.lag.ms: the dirty records are old enough to be cleaned whatever the ratio.
    plog.config = compact_config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=1000)
    clock.now += 2000
    assert cleaner.clean_once()
    # min.compaction.lag.ms: recent segments are not cleanable yet.
    plog.config = compact_config(min_compaction_lag_ms=60_000)
    for i in range(30):
        put(plog, clock, "hot", f"{i}")
    info = cleanable_info(plog, cleaner.first_dirty_offset(("t", 0)), clock.now)
    assert info.dirty_bytes == 0 and not cleaner.clean_once()
    clock.now += 61_000
    assert cleaner.clean_once()
    assert [r.value for r in live(plog) if r.key == b"hot"][-1] == b"29"


def test_keyless_records_removed_and_max_segment_ms_rolls(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock, segment_bytes=1 << 20, max_compaction_lag_ms=500)
    append(plog, build_batch([(None, b"no key")], timestamp_ms=clock.now))
    put(plog, clock, "a", "1")
    clock.now += 1000
    put(plog, clock, "a", "2")  # max.compaction.lag.ms rolls the active segment for a compacted log
    assert len(plog.segments()) == 2
    assert cleaner.clean_once()
    assert [(r.key, r.value) for r in live(plog)] == [(b"a", b"1"), (b"a", b"2")]
    clock.now += 1000
    put(plog, clock, "b", "1")
    assert cleaner.clean_once()
    assert [(r.key, r.value) for r in live(plog)] == [(b"a", b"2"), (b"b", b"1")]


def test_last_batch_of_active_producer_is_kept_empty(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock)
    for seq in range(20):
        put(plog, clock, "k", f"p{seq}", producer_id=7, producer_epoch=0, base_sequence=seq)
    last = plog.log_end_offset - 1
    for i in range(40):
        put(plog, clock, "k", f"plain{i}")  # overwrites everything the producer wrote
    assert cleaner.clean_once()
    headers = [h for h in iter_batches(read_everything(plog)) if h.producer_id == 7]
    assert len(headers) == 1
    (h,) = headers
    assert (h.records_count, h.last_offset, h.base_sequence, h.producer_epoch) == (0, last, 19, 0)
    # The producer's state is intact: its next sequence is accepted, a replay of the last is a duplicate.
    nxt = iter_batches(bytearray(build_batch([(b"k", b"x")], producer_id=7, producer_epoch=0, base_sequence=20)))[0]
    assert plog.producer_state.check(nxt).status.name == "OK"
    # After a restart the state is rebuilt from the (cleaned) log the same way.
    plog.producer_state.delete_snapshots_before(plog.log_end_offset + 1)
    plog.close_handlers()
    reopened = PartitionLog.open(plog.directory, "t", 0, compact_config(), now_ms=clock)
    entry = reopened.producer_state.producers[7]
    assert (entry.last_seq, entry.last_offset) == (19, last)
    reopened.close_handlers()


def test_empty_batch_goes_once_its_producer_writes_again(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock)
    put(plog, clock, "k", "first", producer_id=3, producer_epoch=0, base_sequence=0)
    for i in range(30):
        put(plog, clock, "k", f"plain{i}")
    assert cleaner.clean_once()
    assert [h.records_count for h in iter_batches(read_everything(plog)) if h.producer_id == 3] == [0]
    put(plog, clock, "other", "x", producer_id=3, producer_epoch=0, base_sequence=1)  # its new last batch
    for i in range(30):
        put(plog, clock, "k", f"more{i}")
    assert cleaner.clean_once()
    kept = [h for h in iter_batches(read_everything(plog)) if h.producer_id == 3]
    assert [(h.records_count, h.base_sequence) for h in kept] == [(1, 1)]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_recompressed(tmp_path: Path, codec: int) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock, segment_bytes=900)
    for i in range(30):
        append(plog, build_batch([(f"k{j % 4}".encode(), f"v{i}-{j}".encode() * 3) for j in range(8)],
                                 timestamp_ms=clock.now, codec=codec))
    assert cleaner.clean_once()
    data = read_everything(plog)
    recs = read_all(data)
    check_offsets(recs)
    assert {h.compression for h in iter_batches(data)} == {codec}
    assert {r.key: r.value for r in recs} == {f"k{j}".encode(): f"v29-{j + 4}".encode() * 3 for j in range(4)}


def test_log_changed_during_cleaning_aborts_swap(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock)
    for i in range(80):
        put(plog, clock, f"k{i % 3}", f"v{i}")
    job = cleaner.grab_filthiest()
    assert job is not None
    plog.delete_records(plog.segments()[1].base_offset)  # the first segment goes while cleaning
    stats = cleaner.clean(job, CleanerConfig())
    job.close()
    assert stats.aborted
    assert not list((tmp_path / "t-0").glob("*.cleaned"))
    assert cleaner.clean_once()  # the next round does it
    assert len(live(plog)) < 20


def test_topic_deleted_during_cleaning(tmp_path: Path) -> None:
    clock = Clock()
    lm, plog, cleaner = manager(tmp_path, clock)
    for i in range(80):
        put(plog, clock, f"k{i % 3}", f"v{i}")
    job = cleaner.grab_filthiest()
    assert job is not None
    (renamed,) = lm.schedule_delete("t")
    stats = cleaner.clean(job, CleanerConfig())
    job.close()
    assert stats.aborted
    assert not list(renamed.glob("*.cleaned")) and not (tmp_path / "t-0").exists()


class Crash(Exception):
    pass


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_each_swap_step_leaves_a_valid_log(tmp_path: Path, point: str) -> None:
    clock = Clock()
    lm, plog, cleaner = manager(tmp_path, clock)
    writes = [(f"k{i % 9}", f"v{i}") for i in range(150)]
    for k, v in writes:
        put(plog, clock, k, v)
    before = {r.offset: r for r in live(plog)}
    job = cleaner.grab_filthiest()
    assert job is not None

    def hook(step: str) -> None:
        if step == point:
            raise Crash(step)

    import strom.storage.cleaner as cleaner_module

    original = cleaner_module.crash_hook
    cleaner_module.crash_hook = lambda _p: hook  # type: ignore[assignment]
    try:
        with pytest.raises(Crash):
            cleaner.clean(job, CleanerConfig())
    finally:
        cleaner_module.crash_hook = original
        job.close()
    names = {p.name.split(".", 1)[1] for p in (tmp_path / "t-0").iterdir() if "." in p.name}
    if point == "cleaned":
        assert "log.cleaned" in names
    elif point in ("swap", "deleted-partial", "deleted"):
        assert "log.swap" in names
    plog.close_handlers()  # the crash: nothing more is written
    reopened = PartitionLog.open(plog.directory, "t", 0, compact_config(), recovery_point=0, now_ms=clock)
    recs = read_all(read_everything(reopened))
    check_offsets(recs)
    for r in recs:
        assert before[r.offset] == r
    assert {r.key: r.value for r in recs} == latest_values(writes)
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names), names
    reopened.close_handlers()
    del lm


def test_cleaner_thread_hands_work_to_the_owner(tmp_path: Path) -> None:
    clock = Clock()
    lm = LogManager([tmp_path], compact_config(), now_ms=clock)
    lm.defer_deletions = True
    lm.startup()
    plog = lm.create_log("t", 0, uuid.uuid4())
    for i in range(100):
        put(plog, clock, f"k{i % 4}", f"v{i}")
    owner_threads: set[str] = set()
    lock = threading.Lock()

    def run_on_owner(fn):  # type: ignore[no-untyped-def]
        with lock:  # stands for the event loop: one thing at a time
            owner_threads.add(threading.current_thread().name)
            return fn()

    cleaner = LogCleaner(lm, lambda: CleanerConfig(backoff_ms=20), run_on_owner=run_on_owner, now_ms=clock)
    cleaner.start()
    try:
        end = time.monotonic() + 20
        while cleaner.rounds < 1 and time.monotonic() < end:
            time.sleep(0.02)
        assert cleaner.rounds >= 1
        with lock:
            recs = live(plog)
        assert len(recs) < 30
    finally:
        cleaner.stop()
        cleaner.join(10)
    assert owner_threads == {"strom-log-cleaner"}
    # Replaced segments were renamed to .deleted and wait for file.delete.delay.ms.
    assert list((tmp_path / "t-0").glob("*.log.deleted"))
    assert lm.delete_due_files(force=True) > 0
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    lm.shutdown()


def test_uncompressed_identity_batches_copied(tmp_path: Path) -> None:
    clock = Clock()
    _, plog, cleaner = manager(tmp_path, clock)
    for i in range(40):
        put(plog, clock, f"u{i}", "same")  # unique keys: every batch survives unchanged
    raw = read_everything(plog)
    assert cleaner.clean_once()
    assert read_everything(plog) == raw


def test_aborted_transactions_never_shadow_and_open_ones_wait(tmp_path: Path) -> None:
    """An aborted transactional write of a key is dropped and does not replace the committed value
    (as for a __consumer_offsets commit in an aborted transaction); an open transaction is not
    cleaned (the cleaner stops at the last stable offset)."""
    from strom.records.batch import TRANSACTIONAL_MASK
    from strom.records.control import build_marker_batch

    clock = Clock()
    lm, plog, cleaner = manager(tmp_path, clock)
    txn = {"producer_id": 9, "producer_epoch": 0, "attributes_extra": TRANSACTIONAL_MASK}
    put(plog, clock, "offset", "committed-1")
    put(plog, clock, "offset", "aborted-2", base_sequence=0, **txn)
    append(plog, build_marker_batch(9, 0, False, 0, clock.now))
    for i in range(30):
        put(plog, clock, f"filler-{i % 3}", "x" * 40)
    first_open = plog.log_end_offset
    put(plog, clock, "open", "undecided", producer_id=10, producer_epoch=0, base_sequence=0,
        attributes_extra=TRANSACTIONAL_MASK)
    put(plog, clock, "open", "later", producer_id=10, producer_epoch=0, base_sequence=1,
        attributes_extra=TRANSACTIONAL_MASK)
    for i in range(30):
        put(plog, clock, f"filler-{i % 3}", "y" * 40)
    plog.roll()
    assert plog.last_stable_offset == first_open
    assert cleaner.clean_once()
    rounds = sum(cleaner.clean_once() for _ in range(3))
    assert rounds == 0, "the same dirty range is cleaned again and again"
    values = {(r.key, r.value) for r in live(plog)}
    assert (b"offset", b"committed-1") in values
    assert (b"offset", b"aborted-2") not in values
    assert (b"open", b"undecided") in values and (b"open", b"later") in values  # not cleaned yet
    lm.shutdown()


def test_markers_go_after_their_transactions_data_and_delete_retention(tmp_path: Path) -> None:
    """Kafka's rule for markers: kept while a batch of their transaction is in the log, then given a
    delete horizon (delete.retention.ms) and removed after it. A kept ABORT marker keeps its
    .txnindex entry in the cleaned segment. Replaying the cleaned log from its start finds no open
    transaction."""
    from strom.records.batch import TRANSACTIONAL_MASK
    from strom.records.control import build_marker_batch, read_marker
    from strom.storage.txn_index import AbortedTxn

    clock = Clock()
    lm, plog, cleaner = manager(tmp_path, clock)
    txn = {"producer_id": 9, "producer_epoch": 0, "attributes_extra": TRANSACTIONAL_MASK}

    def filler(tag: str) -> None:
        for i in range(20):
            put(plog, clock, f"filler-{i % 3}", tag * 40)
        plog.roll()

    put(plog, clock, "a", "committed-1", base_sequence=0, **txn)  # transaction 1: superseded by 3
    append(plog, build_marker_batch(9, 0, True, 0, clock.now))
    aborted_at = plog.log_end_offset
    put(plog, clock, "a", "aborted-2", base_sequence=1, **txn)  # transaction 2: aborted
    abort_marker = plog.log_end_offset
    append(plog, build_marker_batch(9, 0, False, 0, clock.now))
    put(plog, clock, "a", "committed-3", base_sequence=2, **txn)  # transaction 3: the live value
    last_commit = plog.log_end_offset
    append(plog, build_marker_batch(9, 0, True, 0, clock.now))
    filler("x")

    def markers() -> list[tuple[int, bool, bool]]:
        """(offset, commit, has a delete horizon) of every marker in the log."""
        data = read_everything(plog)
        out = []
        for h in iter_batches(data):
            if h.is_control:
                m = read_marker(data, h)
                assert m is not None
                out.append((h.base_offset, m.is_commit, delete_horizon(h) is not None))
        return out

    assert cleaner.clean_once()
    # Transaction 1's and 2's records are gone, but this pass met their batches: markers kept, and
    # the kept ABORT marker's entry is in the cleaned segment's .txnindex.
    values = [(r.key, r.value) for r in live(plog) if r.key == b"a"]
    assert values == [(b"a", b"committed-3")]
    assert [(o, c) for o, c, _ in markers()] == [(1, True), (abort_marker, False), (last_commit, True)]
    assert not any(h for _, _, h in markers())
    assert plog.aborted_transactions(0, plog.high_watermark) == [AbortedTxn(9, aborted_at, abort_marker,
                                                                             abort_marker + 1)]
    assert any(s.txn_index.path.exists() for s in plog.segments())

    filler("y")
    assert cleaner.clean_once()  # no batch of transactions 1 and 2 left: their markers get a horizon
    assert markers() == [(1, True, True), (abort_marker, False, True), (last_commit, True, False)]
    assert plog.aborted_transactions(0, plog.high_watermark) == []
    clock.now += 500
    cleaner.clean_once()
    assert len(markers()) == 3  # delete.retention.ms (1000) has not passed yet
    clock.now += 600
    assert cleaner.clean_once()  # cleanable because the horizon has passed
    assert markers() == [(last_commit, True, False)]  # transaction 3's records are alive: it stays
    assert [(r.key, r.value) for r in live(plog) if r.key == b"a"] == [(b"a", b"committed-3")]
    assert not any(s.txn_index.path.exists() for s in plog.segments())

    # Replayed from its start (no producer snapshot), the log has no open transaction.
    hw = plog.high_watermark
    lm.shutdown()
    for snapshot in tmp_path.glob("t-0/*.snapshot"):
        snapshot.unlink()
    lm2 = LogManager([tmp_path], compact_config(), now_ms=clock)
    lm2.startup()
    reopened = lm2.get_log("t", 0)
    assert reopened is not None and reopened.producer_state.ongoing_txns == {}
    assert reopened.last_stable_offset == reopened.log_end_offset >= hw
    lm2.shutdown()


def test_an_interrupted_swap_keeps_the_cleaned_txn_index(tmp_path: Path) -> None:
    """A crash between the .log and the .txnindex leaving .swap: the restart puts the kept aborted
    transactions' index in place, and it never keeps a replaced segment's index."""
    from strom.storage.segment import LOG_SUFFIX, file_name
    from strom.storage.swap import SWAP_SUFFIX, complete_swaps
    from strom.storage.txn_index import TXN_INDEX_SUFFIX

    base = file_name(0, LOG_SUFFIX)[: -len(LOG_SUFFIX)]
    new_index = b"\x00" * 34
    (tmp_path / (base + LOG_SUFFIX)).write_bytes(b"")  # the .log already out of .swap
    (tmp_path / (base + TXN_INDEX_SUFFIX + SWAP_SUFFIX)).write_bytes(new_index)
    complete_swaps(tmp_path)
    assert (tmp_path / (base + TXN_INDEX_SUFFIX)).read_bytes() == new_index
    assert not (tmp_path / (base + TXN_INDEX_SUFFIX + SWAP_SUFFIX)).exists()


def test_marker_rules_one_batch_at_a_time() -> None:
    """CleanedTransactionMetadata and filter_marker on their own: an emptied control batch goes at
    once; a removable marker first gets its horizon, then goes after it; a kept one is unchanged."""
    from strom.records.batch import TRANSACTIONAL_MASK, BatchHeader, read_header
    from strom.records.control import build_marker_batch
    from strom.records.filter import empty_batch
    from strom.storage.cleaner import CleanedTransactionMetadata, filter_marker
    from strom.storage.txn_index import AbortedTxn

    def header_of(data: bytes, base_offset: int) -> tuple[bytes, BatchHeader]:
        buf = bytearray(data)
        buf[0:8] = base_offset.to_bytes(8, "big")
        return bytes(buf), read_header(bytes(buf))

    data_batch = build_batch([(b"k", b"v")], timestamp_ms=1, producer_id=5, producer_epoch=0, base_sequence=0,
                             attributes_extra=TRANSACTIONAL_MASK)
    txns = CleanedTransactionMetadata([AbortedTxn(5, 0, 1, 2)])
    _, h0 = header_of(data_batch, 0)
    assert txns.on_batch(h0)  # aborted: its records go
    abort, h1 = header_of(build_marker_batch(5, 0, False, 0, 1), 1)
    assert txns.on_marker(abort, h1) == (False, AbortedTxn(5, 0, 1, 2))
    commit, h2 = header_of(build_marker_batch(5, 0, True, 0, 1), 2)
    assert txns.on_marker(commit, h2) == (True, None)  # no batch of it left
    stamped = filter_marker(commit, h2, True, now_ms=100, delete_retention_ms=50)
    assert stamped.data is not None and stamped.horizon_ms == 150
    h3 = read_header(stamped.data)
    assert h3.is_control and delete_horizon(h3) == 150
    assert filter_marker(stamped.data, h3, True, now_ms=149, delete_retention_ms=50).data == stamped.data
    assert filter_marker(stamped.data, h3, True, now_ms=150, delete_retention_ms=50).data is None
    assert filter_marker(commit, h2, False, now_ms=100, delete_retention_ms=50).data == commit
    emptied = empty_batch(h2)
    he = read_header(emptied)
    assert CleanedTransactionMetadata([]).on_marker(emptied, he) == (True, None)
    assert filter_marker(emptied, he, True, now_ms=100, delete_retention_ms=50).data is None
