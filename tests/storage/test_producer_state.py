"""Idempotent producers: duplicates, sequence gaps, fencing, and state across restarts and SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from storage_helpers import append, batch

from strom.records.batch import read_header
from strom.storage.log import LogConfig, PartitionLog
from strom.storage.log_manager import LogManager
from strom.storage.producer_state import ProducerStateManager, SequenceStatus, list_snapshots

OK = SequenceStatus.OK
DUP = SequenceStatus.DUPLICATE
OOO = SequenceStatus.OUT_OF_ORDER_SEQUENCE
FENCED = SequenceStatus.INVALID_PRODUCER_EPOCH


def pbatch(seq: int, n: int = 1, pid: int = 42, epoch: int = 0) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def check(log: PartitionLog, b: bytes) -> SequenceStatus:
    return log.producer_state.check(read_header(b)).status


def open_log(path: Path, **kw: object) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, LogConfig(segment_bytes=400), **kw)  # type: ignore[arg-type]


def test_duplicates_gaps_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert check(log, pbatch(7)) is OK  # unknown producer: any sequence
    append(log, batch(2))  # offsets 0, 1 from a plain producer
    info = append(log, pbatch(0, 3))
    result = log.producer_state.check(read_header(pbatch(0, 3)))
    assert result.status is DUP and (result.first_offset, result.last_offset) == (info.first_offset, 4)
    assert result.error == "none"  # a duplicate is answered as a success with the original offset
    assert check(log, pbatch(3)) is OK
    assert check(log, pbatch(4)) is OOO
    assert check(log, pbatch(1, 2)) is OOO  # overlaps, but not the same batch
    assert check(log, pbatch(0, 3, epoch=1)) is OK  # a new epoch starts at sequence 0
    assert check(log, pbatch(3, epoch=1)) is OOO
    append(log, pbatch(0, epoch=1))
    assert check(log, pbatch(3, epoch=0)) is FENCED
    assert log.producer_state.check(read_header(pbatch(3, epoch=0))).error == "invalid_producer_epoch"
    assert check(log, batch(1)) is OK  # no producer id: not tracked


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(6):
        append(log, pbatch(seq))
    assert check(log, pbatch(0)) is OOO
    for seq in range(1, 6):
        assert check(log, pbatch(seq)) is DUP


def test_sequence_wraps_around() -> None:
    state = ProducerStateManager(Path("/nonexistent"))
    header = read_header(pbatch(2**31 - 1))
    state.update(header)
    assert state.check(read_header(pbatch(0))).status is OK
    assert state.check(read_header(pbatch(1))).status is OOO


def test_state_survives_clean_restart(tmp_path: Path) -> None:
    """Rolls every 400 bytes wrote snapshots; the few batches after the last one are replayed at
    the start rather than snapshotted at the close (less than index.interval.bytes)."""
    log = open_log(tmp_path)
    for seq in range(0, 30, 3):
        append(log, pbatch(seq, 3))
    log.flush()
    log.close()
    assert 0 < list_snapshots(tmp_path)[-1][0] < 30
    again = open_log(tmp_path, recovery_point=30, clean_shutdown=True)
    r = again.producer_state.check(read_header(pbatch(27, 3)))
    assert (r.status, r.first_offset) == (DUP, 27)
    assert check(again, pbatch(30)) is OK


def test_close_writes_a_snapshot_when_the_replay_would_read_more_than_an_index_interval(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=256)
    log = PartitionLog.open(tmp_path, "t", 0, config)
    append(log, pbatch(0, 3))  # under 256 bytes after no snapshot at all
    log.flush()
    log.close()
    assert list_snapshots(tmp_path) == []
    again = PartitionLog.open(tmp_path, "t", 0, config, recovery_point=3, clean_shutdown=True)
    assert check(again, pbatch(0, 3)) is DUP  # the start replayed the batch
    for seq in range(3, 30, 3):
        append(again, pbatch(seq, 3))
    again.flush()
    again.close()
    assert [offset for offset, _ in list_snapshots(tmp_path)] == [30]
    third = PartitionLog.open(tmp_path, "t", 0, config, recovery_point=30, clean_shutdown=True)
    assert check(third, pbatch(27, 3)) is DUP and check(third, pbatch(30)) is OK
    third.close()
    assert [offset for offset, _ in list_snapshots(tmp_path)] == [30]  # nothing after it: not again


def test_state_rebuilt_from_the_log_after_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(40):
        append(log, pbatch(seq, pid=1), pbatch(seq, pid=2, epoch=3))
    assert len(log.segments()) > 3  # rolls wrote snapshots; the tail after the last one is replayed
    log.close_handlers()
    again = open_log(tmp_path)
    assert check(again, pbatch(39, pid=1)) is DUP
    assert check(again, pbatch(39, pid=2, epoch=3)) is DUP
    assert check(again, pbatch(40, pid=2, epoch=3)) is OK
    assert check(again, pbatch(40, pid=2, epoch=2)) is FENCED


def test_unreadable_snapshot_is_ignored(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(40):
        append(log, pbatch(seq))
    log.close()
    for _, path in list_snapshots(tmp_path):
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    again = open_log(tmp_path, clean_shutdown=True, recovery_point=40)
    assert check(again, pbatch(39)) is DUP
    assert check(again, pbatch(40)) is OK
    assert list_snapshots(tmp_path) == []  # the damaged ones were removed


def test_truncation_forgets_truncated_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(20):
        append(log, pbatch(seq))
    log.truncate_to(15)
    assert check(log, pbatch(14)) is DUP
    assert check(log, pbatch(15)) is OK  # no longer a duplicate: it is gone from the log
    assert all(offset <= 15 for offset, _ in list_snapshots(tmp_path))


def test_delete_records_evicts_producers_below_the_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, pid=1))
    for seq in range(10):
        append(log, pbatch(seq, pid=2))
    log.delete_records(5)
    assert 1 not in log.producer_state.producers
    assert 2 in log.producer_state.producers


_WRITER = textwrap.dedent(
    """
    import sys, uuid
    from pathlib import Path
    from strom.records.batch import iter_batches
    from strom.records.codec import build_batch
    from strom.storage.log import LogConfig
    from strom.storage.log_manager import LogManager

    lm = LogManager([Path(sys.argv[1])], LogConfig(segment_bytes=2000))
    lm.startup()
    log = lm.create_log("idem", 0, uuid.UUID(int=1))
    for seq in range(200):
        buf = bytearray(build_batch([(b"k", b"v%d" % seq)], producer_id=9, producer_epoch=0, base_sequence=seq))
        log.append(buf, iter_batches(buf), 0)
    print("appended", log.log_end_offset, flush=True)
    sys.stdin.read()
    """
)


def test_state_survives_sigkill(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["appended", "200"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    lm = LogManager([tmp_path], LogConfig(segment_bytes=2000))
    lm.startup()
    log = lm.get_log("idem", 0)
    assert log is not None and log.log_end_offset == 200
    for seq in range(195, 200):
        r = log.producer_state.check(read_header(pbatch(seq, pid=9)))
        assert (r.status, r.first_offset) == (DUP, seq)
    assert check(log, pbatch(200, pid=9)) is OK
    lm.shutdown()
