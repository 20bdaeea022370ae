"""Transactions on one partition: the last stable offset, markers, the aborted-transaction index,
and all of it rebuilt after a crash (reopen without a clean close) and after truncation."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import append

from strom.records.batch import TRANSACTIONAL_MASK, read_header
from strom.records.codec import build_batch
from strom.records.control import build_marker_batch, read_marker
from strom.storage.log import LogConfig, PartitionLog
from strom.storage.txn_index import AbortedTxn, TransactionIndex


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp_ms=1000, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, attributes_extra=TRANSACTIONAL_MASK)


def marker(pid: int, commit: bool, epoch: int = 0) -> bytes:
    return build_marker_batch(pid, epoch, commit, coordinator_epoch=3, timestamp_ms=1000)


def open_log(path: Path, segment_bytes: int = 1 << 20) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, LogConfig(segment_bytes=segment_bytes))


def test_marker_round_trip() -> None:
    b = marker(7, True)
    h = read_header(b)
    assert h.is_control and h.is_transactional and h.producer_id == 7
    m = read_marker(b, h)
    assert m is not None and m.is_commit and m.coordinator_epoch == 3


def test_lso_and_aborted_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, build_batch([(b"a", b"plain")], timestamp_ms=1))  # offset 0
    append(log, txn_batch(1, 0))  # 1-2 (pid 1)
    append(log, txn_batch(2, 0))  # 3-4 (pid 2)
    assert log.last_stable_offset == 1 and log.high_watermark == 5
    append(log, marker(1, commit=False))  # 5: pid 1 aborted
    assert log.last_stable_offset == 3  # pid 2 still open
    assert log.aborted_transactions(0, log.last_stable_offset) == [AbortedTxn(1, 1, 5, 3)]
    append(log, marker(2, commit=True))  # 6
    assert log.last_stable_offset == 7 == log.high_watermark
    assert log.aborted_transactions(6, 7) == []  # the abort ended before offset 6
    assert TransactionIndex(log.active_segment.txn_index.path).collect(0, 100)[0] == [AbortedTxn(1, 1, 5, 3)]


def test_rebuilt_after_crash_and_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(4):
        append(log, txn_batch(10 + i, 0))
        append(log, marker(10 + i, commit=i % 2 == 0))
    append(log, txn_batch(99, 0))  # left open
    aborted = log.aborted_transactions(0, log.high_watermark)
    assert [t.producer_id for t in aborted] == [11, 13]
    lso = log.last_stable_offset
    assert lso < log.high_watermark and len(log.segments()) > 1
    end = log.log_end_offset
    log.close_handlers()  # a crash: no snapshot, nothing cleanly closed
    again = PartitionLog.open(tmp_path, "t", 0, LogConfig(segment_bytes=300))
    assert again.last_stable_offset == lso  # from the newest snapshot and the log after it
    assert again.aborted_transactions(0, again.high_watermark) == aborted
    again.close_handlers()
    for seg in log.segments():  # without snapshots nor indexes everything is rebuilt from the log
        seg.txn_index.path.unlink(missing_ok=True)
    for snap in tmp_path.glob("*.snapshot"):
        snap.unlink()
    again = PartitionLog.open(tmp_path, "t", 0, LogConfig(segment_bytes=300))
    assert again.log_end_offset == end
    assert again.last_stable_offset == lso
    assert again.aborted_transactions(0, again.high_watermark) == aborted
    # Cutting the log before the last abort marker drops its entry; the transaction is open again.
    again.truncate_to(aborted[-1].last_offset)
    assert [t.producer_id for t in again.aborted_transactions(0, again.high_watermark)] == [11]
    assert again.last_stable_offset == aborted[-1].first_offset
    again.close()
    clean = PartitionLog.open(tmp_path, "t", 0, LogConfig(segment_bytes=300), clean_shutdown=True,
                              recovery_point=again.log_end_offset)
    assert clean.last_stable_offset == aborted[-1].first_offset
    assert [t.producer_id for t in clean.aborted_transactions(0, clean.high_watermark)] == [11]


def test_retention_removes_txn_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(6):
        append(log, txn_batch(20 + i, 0))
        append(log, marker(20 + i, commit=False))
    first = log.segments()[0]
    assert first.txn_index.path.exists()
    log.advance_log_start_offset(log.segments()[1].base_offset)
    assert not first.txn_index.path.exists()


def test_time_retention_deletes_txn_index_with_its_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, "t", 0, LogConfig(segment_bytes=300, retention_ms=1))
    for i in range(6):
        append(log, txn_batch(30 + i, 0))
        append(log, marker(30 + i, commit=False))
    log.high_watermark = log.log_end_offset
    old = [s.txn_index.path for s in log.segments()[:-1]]
    assert old and all(p.exists() for p in old)
    assert log.delete_old_segments() >= len(old)  # the batches' timestamps (1000) are long past
    assert not any(p.exists() for p in old)
    assert all(s.txn_index.path.exists() or not s.txn_index.entries for s in log.segments())


def test_idle_producers_expire_but_not_one_with_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(1, 0))  # pid 1: open, timestamp 1000
    append(log, txn_batch(2, 0))
    append(log, marker(2, commit=True))  # pid 2: ended, last timestamp 1000
    append(log, build_batch([(b"k", b"v")], timestamp_ms=5000, producer_id=3, producer_epoch=0, base_sequence=0))
    ps = log.producer_state
    assert ps.remove_expired_producers(now=5999, expiration_ms=1000) == [2]
    assert sorted(ps.producers) == [1, 3]
    assert ps.remove_expired_producers(now=10**9, expiration_ms=1000) == [3]
    assert list(ps.producers) == [1] and log.last_stable_offset == 0
