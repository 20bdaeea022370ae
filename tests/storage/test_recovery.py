"""Recovery with real faults: torn tails, corrupt CRCs, garbage indexes. The log always wins."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from storage_helpers import append, batch, read_everything, values

from strom.records.batch import iter_batches
from strom.storage.log import LogConfig, PartitionLog

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def fill(path: Path, n: int = 40) -> PartitionLog:
    log = PartitionLog.open(path, "t", 0, CONFIG)
    for i in range(n):
        append(log, batch(2, value=b"%03d" % i + b"z" * 30, ts=1000 + i))
    return log


def crash(log: PartitionLog) -> int:
    """Stop like a killed process: no index files, no snapshot, no marker. Returns the recovery point."""
    log.close_handlers()
    return log.recovery_point


def reopen(path: Path, recovery_point: int = 0, clean: bool = False) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, CONFIG, recovery_point=recovery_point, clean_shutdown=clean)


def clean_restart(log: PartitionLog, path: Path, config: LogConfig) -> PartitionLog:
    """Flush and close ``log`` as a clean stop does, then open it as the next clean start."""
    log.flush()
    log.close()
    return PartitionLog.open(path, "t", 0, config, recovery_point=log.log_end_offset, clean_shutdown=True)


def active_file(log: PartitionLog) -> Path:
    return log.segments()[-1].log_path


def test_torn_last_batch_is_cut(tmp_path: Path) -> None:
    log = fill(tmp_path)
    log.flush()
    expected = read_everything(log)
    leo = log.log_end_offset
    path = active_file(log)
    rp = crash(log)
    torn = batch(3, value=b"never acknowledged")
    with path.open("ab") as f:
        f.write(torn[: len(torn) // 2])
    again = reopen(tmp_path, rp)
    assert again.log_end_offset == leo
    assert read_everything(again) == expected
    assert append(again, batch(1, value=b"after")).first_offset == leo
    assert values(again)[-1] == b"after0"


def test_chopped_tail_loses_only_the_torn_batch(tmp_path: Path) -> None:
    log = fill(tmp_path)
    last_batch_size = iter_batches(log.read(78, 1000))[0].size
    path = active_file(log)
    crash(log)
    os.truncate(path, path.stat().st_size - 7)
    again = reopen(tmp_path, 0)
    assert again.log_end_offset == 78
    assert path.stat().st_size == again.segments()[-1].size
    assert again.segments()[-1].size % last_batch_size == 0


def test_preallocated_zeros_after_the_data_are_cut(tmp_path: Path) -> None:
    log = fill(tmp_path, 5)
    path = active_file(log)
    size = path.stat().st_size
    crash(log)
    with path.open("ab") as f:
        f.write(b"\x00" * 4096)
    again = reopen(tmp_path, 0)
    assert again.log_end_offset == 10 and path.stat().st_size == size


def test_corrupt_crc_in_the_middle_cuts_the_log_there(tmp_path: Path) -> None:
    log = fill(tmp_path)
    segs = log.segments()
    assert len(segs) >= 5
    log.flush()
    rp = segs[1].base_offset  # pretend the last checkpoint was early: segments 1.. are re-validated
    victim = segs[2]
    everything = read_everything(log)
    crash(log)
    # Flip a byte inside the records of the third batch of segment 2 (covered by its CRC).
    data = victim.log_path.read_bytes()
    headers = iter_batches(data)
    bad = headers[2]
    with victim.log_path.open("r+b") as f:
        f.seek(bad.position + bad.size - 2)
        f.write(bytes([data[bad.position + bad.size - 2] ^ 0xFF]))
    again = reopen(tmp_path, rp)
    assert again.log_end_offset == bad.base_offset
    assert [s.base_offset for s in again.segments()] == [s.base_offset for s in segs[:3]]
    assert read_everything(again) == everything[: len(read_everything(again))]
    assert len(values(again)) == bad.base_offset
    assert not any(p.name.startswith(f"{segs[3].base_offset:020d}") for p in tmp_path.iterdir())
    assert append(again, batch(1)).first_offset == bad.base_offset


def test_offsets_going_backwards_count_as_corruption(tmp_path: Path) -> None:
    log = fill(tmp_path, 12)
    first = log.segments()[0].log_path
    crash(log)
    headers = iter_batches(first.read_bytes())
    with first.open("r+b") as f:  # batch 2's base offset rewritten to 0 (the CRC does not cover it)
        f.seek(headers[2].position)
        f.write(struct.pack(">q", 0))
    again = reopen(tmp_path, 0)
    assert again.log_end_offset == headers[2].base_offset
    assert len(again.segments()) == 1


def test_garbage_index_files_are_rebuilt_after_clean_shutdown(tmp_path: Path) -> None:
    log = fill(tmp_path)
    expected = read_everything(log)
    log.flush()
    log.close()
    for p in tmp_path.glob("*.index"):
        p.write_bytes(os.urandom(p.stat().st_size or 16))
    for p in tmp_path.glob("*.timeindex"):
        p.write_bytes(os.urandom(36))
    again = reopen(tmp_path, 80, clean=True)
    assert again.log_end_offset == 80
    assert read_everything(again) == expected
    for offset in range(0, 80, 7):  # every offset found through the rebuilt index
        assert iter_batches(again.read(offset, 1))[0].base_offset == offset - offset % 2
    assert again.offset_for_timestamp(1017) == (34, 1017)


def test_garbage_index_files_are_rebuilt_after_crash(tmp_path: Path) -> None:
    log = fill(tmp_path)
    expected = read_everything(log)
    log.flush()
    rp = crash(log)
    for p in tmp_path.glob("*.index"):
        p.write_bytes(b"\xff" * 24)
    again = reopen(tmp_path, rp)
    assert read_everything(again) == expected
    assert all(iter_batches(again.read(o, 1))[0].base_offset == o for o in range(0, 80, 2))


def test_plausible_but_wrong_index_entry_is_caught_when_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = fill(tmp_path)
    log.flush()
    log.close()
    seg_path = sorted(tmp_path.glob("*.index"))[0]
    entries = list(struct.iter_unpack(">ii", seg_path.read_bytes()))
    assert len(entries) >= 2
    rel, pos = entries[0]
    entries[0] = (rel, pos + 1)  # still ordered, so it passes the load check, but points mid-batch
    seg_path.write_bytes(b"".join(struct.pack(">ii", *e) for e in entries))
    again = reopen(tmp_path, 80, clean=True)
    target = again.segments()[0].base_offset + rel
    with caplog.at_level(logging.WARNING):
        assert iter_batches(again.read(target, 1))[0].last_offset == target
    assert "rebuilding the index" in caplog.text


def test_clean_shutdown_still_checks_the_active_tail(tmp_path: Path) -> None:
    log = fill(tmp_path)
    path = active_file(log)
    log.flush()
    log.close()
    os.truncate(path, path.stat().st_size - 3)  # damaged while the broker was down
    again = reopen(tmp_path, 80, clean=True)
    assert again.log_end_offset == 78
    assert len(values(again)) == 78


def test_clean_shutdown_with_file_cut_before_last_index_entry(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, "t", 0, LogConfig(index_interval_bytes=100))
    for i in range(12):
        append(log, batch(2, value=b"%03d" % i + b"z" * 30))
    seg = log.segments()[-1]
    assert len(seg.offset_index) >= 3
    cut_at = seg.offset_index.positions[1]  # a batch boundary before the last index entry
    log.close()
    os.truncate(seg.log_path, cut_at)
    again = PartitionLog.open(
        tmp_path, "t", 0, LogConfig(index_interval_bytes=100), recovery_point=24, clean_shutdown=True
    )
    assert again.segments()[-1].size == cut_at
    assert again.log_end_offset == len(values(again)) < 24


def test_missing_index_files_and_leftovers(tmp_path: Path) -> None:
    log = fill(tmp_path)
    expected = read_everything(log)
    log.flush()
    log.close()
    for p in tmp_path.glob("*.index"):
        p.unlink()
    (tmp_path / "00000000000000000000.log.deleted").write_bytes(b"x")
    (tmp_path / "recovery.tmp").write_bytes(b"x")
    (tmp_path / "00000000000000099999.index").write_bytes(b"")  # orphan: no .log
    again = reopen(tmp_path, 80, clean=True)
    assert read_everything(again) == expected
    names = {p.name for p in tmp_path.iterdir()}
    assert "recovery.tmp" not in names and "00000000000000000000.log.deleted" not in names
    assert "00000000000000099999.index" not in names
    again.close()
    assert all((tmp_path / f"{s.base_offset:020d}.index").exists() for s in again.segments())


def test_leader_epochs_relearnt_from_batches(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, "t", 0, CONFIG)
    append(log, batch(2), leader_epoch=1)
    append(log, batch(2), leader_epoch=3)
    append(log, batch(2), leader_epoch=3)
    crash(log)
    (tmp_path / "leader-epoch-checkpoint").write_bytes(b"garbage")
    again = reopen(tmp_path, 0)
    assert [tuple(e) for e in again.leader_epoch_cache.entries] == [(1, 0), (3, 2)]


def test_log_start_offset_past_surviving_data(tmp_path: Path) -> None:
    log = fill(tmp_path, 4)
    path = active_file(log)
    crash(log)
    os.truncate(path, 10)  # everything lost, but DeleteRecords had moved the start to 8
    again = PartitionLog.open(tmp_path, "t", 0, CONFIG, log_start_offset=8)
    assert again.log_start_offset == again.log_end_offset == 8
    assert append(again, batch(1)).first_offset == 8


@pytest.mark.parametrize("which", ["*.index", "*.timeindex"])
def test_empty_index_files_are_not_trusted(tmp_path: Path, which: str) -> None:
    """An empty index is well-formed, but a segment longer than index.interval.bytes (or with
    timestamps) cannot have one: the cheap check against the log's tail must notice."""
    log = fill(tmp_path)
    expected = read_everything(log)
    log.flush()
    log.close()
    for p in tmp_path.glob(which):
        p.write_bytes(b"")
    again = reopen(tmp_path, 80, clean=True)
    assert read_everything(again) == expected
    for k in (0, 17, 33, 79):
        assert again.offset_for_timestamp(1000 + k // 2) == (k - k % 2, 1000 + k // 2)
        assert iter_batches(again.read(k, 1))[0].base_offset == k - k % 2


def test_clean_close_rewrites_only_the_index_files_that_changed(tmp_path: Path) -> None:
    """After a clean start, a small batch changes the time index (its final entry) but not the
    offset index: a close appends the entry to the one in place, leaves the other alone, and the
    next clean start trusts both and serves every record."""
    config = LogConfig(index_interval_bytes=300)
    log = PartitionLog.open(tmp_path, "t", 0, config)
    append(log, batch(2, ts=1000, value=b"v" * 200))
    append(log, batch(1, ts=1500, value=b"v" * 200))  # past index.interval.bytes: an entry
    assert len(log.segments()[-1].offset_index) == 1
    again = clean_restart(log, tmp_path, config)
    seg = again.segments()[-1]
    index_inode = os.stat(seg.offset_index.path).st_ino
    time_inode = os.stat(seg.time_index.path).st_ino
    index_mtime = os.stat(seg.offset_index.path).st_mtime_ns
    assert os.path.getsize(seg.time_index.path) == 12
    append(again, batch(1, ts=2000))
    third = clean_restart(again, tmp_path, config)
    assert os.stat(seg.offset_index.path).st_ino == index_inode  # not written again
    assert os.stat(seg.offset_index.path).st_mtime_ns == index_mtime
    # Its final entry is the new max, appended in place (the same file, one 12-byte entry more).
    assert os.stat(seg.time_index.path).st_ino == time_inode
    assert os.path.getsize(seg.time_index.path) == 24
    assert not third.segments()[-1].indexes_dirty  # the files agreed with the log
    assert third.log_end_offset == 4 and len(values(third)) == 4
    assert third.offset_for_timestamp(1800) == (3, 2000)


def test_a_segment_under_one_index_interval_gets_no_index_files(tmp_path: Path) -> None:
    """Its time index could hold only the max timestamp, which a start reads from the headers
    (all of them: there is no offset index entry to start after)."""
    config = LogConfig(index_interval_bytes=4096)
    log = PartitionLog.open(tmp_path, "t", 0, config)
    append(log, batch(2, ts=1000))
    again = clean_restart(log, tmp_path, config)
    seg = again.segments()[-1]
    assert not seg.offset_index.path.exists() and not seg.time_index.path.exists()
    assert (seg.max_timestamp, seg.offset_of_max_timestamp) == (1000, 1)
    assert not seg.indexes_dirty
    append(again, batch(1, ts=3000), batch(1, ts=2000))
    third = clean_restart(again, tmp_path, config)
    seg = third.segments()[-1]
    assert not seg.offset_index.path.exists() and not seg.time_index.path.exists()
    assert (seg.max_timestamp, seg.offset_of_max_timestamp) == (3000, 2)
    assert third.offset_for_timestamp(2500) == (2, 3000)
    assert third.log_end_offset == 4 and len(values(third)) == 4
    # A time index entry newer than every batch is not this segment's: rebuilt from the log.
    seg.time_index.path.write_bytes(struct.pack(">qi", 9000, 0))
    third.close()
    fourth = PartitionLog.open(tmp_path, "t", 0, config, recovery_point=4, clean_shutdown=True)
    assert fourth.segments()[-1].max_timestamp == 3000



@pytest.mark.parametrize("loss", ["time index entry", "time index file", "offset index file", "snapshot"])
def test_clean_start_checks_what_the_close_did_not_fsync(tmp_path: Path, loss: str) -> None:
    """A clean close fsyncs the log but not the index files it only extended or made, and skips
    a snapshot the start can replay without: what a power cut can still take from them after the
    clean shutdown marker is durable is found by the start's checks (or replayed) and rebuilt."""
    config = LogConfig(index_interval_bytes=300)
    log = PartitionLog.open(tmp_path, "t", 0, config)
    append(log, batch(2, ts=1000, value=b"v" * 200, producer_id=7, producer_epoch=0, base_sequence=0))
    again = clean_restart(log, tmp_path, config)
    seg = again.segments()[-1]
    append(again, batch(1, ts=5000, value=b"v" * 200, producer_id=7, producer_epoch=0, base_sequence=2))
    append(again, batch(1, ts=9000, producer_id=7, producer_epoch=0, base_sequence=3))
    assert len(seg.offset_index) == 1 and seg.time_index.last_entry() == (5000, 2)
    again.flush()
    again.close()
    assert os.path.getsize(seg.time_index.path) == 24  # (5000, 2) and the final (9000, 3)
    if loss == "time index entry":  # the final entry appended in place never reached the disk
        os.truncate(seg.time_index.path, 12)
    elif loss == "time index file":
        seg.time_index.path.unlink()
    elif loss == "offset index file":
        seg.offset_index.path.write_bytes(b"\0" * 8)  # a page of zeros where the entry should be
    else:
        for snapshot in tmp_path.glob("*.snapshot"):
            snapshot.unlink()
    third = PartitionLog.open(tmp_path, "t", 0, config, recovery_point=4, clean_shutdown=True)
    active = third.segments()[-1]
    assert (active.max_timestamp, active.offset_of_max_timestamp) == (9000, 3)
    assert third.offset_for_timestamp(6000) == (3, 9000)
    assert third.log_end_offset == 4 and len(values(third)) == 4
    header = iter_batches(batch(1, producer_id=7, producer_epoch=0, base_sequence=3))[0]
    assert third.producer_state.check(header).first_offset == 3  # a duplicate of offset 3
