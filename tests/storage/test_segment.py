"""LogSegment: writing, Kafka's sparse index rule, recovery rebuilding the same indexes."""

from __future__ import annotations

import os
from pathlib import Path

from storage_helpers import batch

from strom.records.batch import assign_offsets, iter_batches
from strom.storage.segment import LogSegment, iter_headers


def _fill(seg: LogSegment, count: int, records_per_batch: int = 2, ts0: int = 1000) -> list[bytes]:
    """Append ``count`` batches with increasing timestamps, indexing each as the log does."""
    written = []
    offset = seg.base_offset
    for i in range(count):
        buf = bytearray(batch(records_per_batch, value=b"x" * 40, ts=ts0 + i))
        (h,) = iter_batches(buf)
        assign_offsets(buf, h, offset, 0)
        pos = seg.write(buf)
        seg.index_batch(pos, offset + h.last_offset_delta, h.max_timestamp)
        offset += h.last_offset_delta + 1
        written.append(bytes(buf))
    seg.next_offset = offset
    return written


def test_write_translate_and_read(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 100, index_interval_bytes=256, now_ms=0)
    written = _fill(seg, 30)
    assert (tmp_path / "00000000000000000100.log").stat().st_size == seg.size == sum(map(len, written))
    assert len(seg.offset_index) > 3
    for offset in (100, 101, 117, 159):
        h = seg.translate_offset(offset)
        assert h is not None and h.base_offset <= offset <= h.last_offset
        assert seg.read(h.position, h.size) == written[(offset - 100) // 2]
    assert seg.translate_offset(160) is None


def test_index_entries_follow_kafkas_interval_rule(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=256, now_ms=0)
    written = _fill(seg, 20)
    size = len(written[0])
    # An entry for a batch once more than index.interval.bytes were written since the last entry.
    expected, last = [], 0
    for i in range(20):
        pos = i * size
        if pos - last > 256:
            expected.append(pos)
            last = pos
    assert list(seg.offset_index.positions) == expected
    assert [seg.base_offset + r for r in seg.offset_index.relative_offsets] == [
        p // size * 2 + 1 for p in expected
    ]


def test_recover_rebuilds_the_same_indexes(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    _fill(seg, 25)
    offsets, positions = list(seg.offset_index.relative_offsets), list(seg.offset_index.positions)
    times = list(seg.time_index.timestamps)
    max_ts = seg.max_timestamp
    seg.offset_index.clear()
    seg.time_index.clear()
    assert seg.recover() == 0
    assert list(seg.offset_index.relative_offsets) == offsets
    assert list(seg.offset_index.positions) == positions
    assert list(seg.time_index.timestamps) == times
    assert seg.max_timestamp == max_ts
    assert seg.next_offset == 50


def test_seal_writes_index_files_and_load_trusts_them(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    _fill(seg, 25)
    seg.seal()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 8 * len(seg.offset_index)
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 12 * len(seg.time_index)
    assert seg.time_index.last_entry() == (1024, 49)  # the final entry written when sealed
    seg.close()
    again = LogSegment.open(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    assert again.load_indexes()
    assert list(again.offset_index.positions) == list(seg.offset_index.positions)
    assert again.max_timestamp == 1024


def test_load_rejects_index_pointing_at_the_wrong_batch(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    _fill(seg, 25)
    seg.offset_index.relative_offsets[-1] += 1  # plausible, ordered, but not the batch's last offset
    seg.seal()
    seg.close()
    again = LogSegment.open(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    assert not again.load_indexes()


def test_recover_cuts_torn_tail(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    written = _fill(seg, 10)
    os.ftruncate(seg.fd, seg.size - 5)
    seg.size -= 5
    cut = seg.recover()
    assert cut == len(written[-1]) - 5
    assert seg.size == sum(map(len, written[:-1]))
    assert seg.next_offset == 18
    assert os.fstat(seg.fd).st_size == seg.size


def test_recover_from_index_tail_detects_damage(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    written = _fill(seg, 25)
    os.pwrite(seg.fd, b"\xff\xff", seg.size - 3)  # corrupt the last batch's records (CRC covers them)
    cut = seg.recover(from_index_tail=True)
    assert cut == len(written[-1])
    assert seg.next_offset == 48


def test_truncate_to_removes_the_containing_batch(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    written = _fill(seg, 25)
    removed = seg.truncate_to(21)  # inside the batch 20..21
    assert removed == 15 * len(written[0])
    assert seg.next_offset == 20
    assert all(seg.base_offset + r < 20 for r in seg.offset_index.relative_offsets)
    assert seg.max_timestamp == 1009


def test_iter_headers_stops_at_garbage(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    written = _fill(seg, 5)
    os.pwrite(seg.fd, b"\x00" * 30, seg.size)
    seg.size += 30
    headers = list(iter_headers(seg.fd, 0, seg.size, verify=True, chunk=64))
    assert [h.position for h in headers] == [i * len(written[0]) for i in range(5)]


def test_last_boundary_uses_whole_batches(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200, now_ms=0)
    written = _fill(seg, 25)
    size = len(written[0])
    assert seg.last_boundary(size, 11 * size + 7) == 11 * size
    assert seg.last_boundary(size, 11 * size) == 11 * size
    assert seg.last_boundary(3 * size, 4 * size - 1) == 3 * size
