"""OffsetIndex and TimeIndex: lookups, Kafka's byte format, and rejection of damaged files."""

from __future__ import annotations

import struct
from pathlib import Path

from strom.storage.index import OffsetIndex, TimeIndex


def test_offset_index_lookup_floor(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    assert idx.lookup(150) == 0  # no entries: scan from the segment start
    idx.append(110, 4100)
    idx.append(130, 8300)
    assert idx.lookup(109) == 0
    assert idx.lookup(110) == 4100
    assert idx.lookup(129) == 4100
    assert idx.lookup(130) == 8300
    assert idx.lookup(10_000) == 8300
    assert idx.last_position_at_or_before(8299) == 4100
    assert idx.last_position_at_or_before(8300) == 8300
    assert idx.last_position_at_or_before(10) == 0


def test_offset_index_file_is_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100)
    idx.append(110, 4100)
    idx.append(130, 8300)
    idx.write()
    assert path.read_bytes() == struct.pack(">iiii", 10, 4100, 30, 8300)
    loaded = OffsetIndex(path, 100)
    assert loaded.load(segment_size=9000)
    assert list(loaded.relative_offsets) == [10, 30]
    assert list(loaded.positions) == [4100, 8300]


def test_offset_index_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0)
    assert not idx.load(100)  # missing
    path.write_bytes(b"\x01" * 7)  # not a whole entry
    assert not idx.load(100)
    path.write_bytes(struct.pack(">iiii", 10, 50, 5, 60))  # offsets go backwards
    assert not idx.load(100)
    path.write_bytes(struct.pack(">iiii", 10, 50, 20, 40))  # positions go backwards
    assert not idx.load(100)
    path.write_bytes(struct.pack(">ii", 10, 500))  # beyond the segment
    assert not idx.load(100)
    assert len(idx) == 0
    path.write_bytes(struct.pack(">ii", 10, 50))
    assert idx.load(100)


def test_offset_index_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 0)
    for i in range(1, 6):
        idx.append(i * 10, i * 1000)
    idx.truncate_to_position(3000)  # the batch at 3000 is gone
    assert list(idx.positions) == [1000, 2000]
    idx.truncate_to_position(2001)
    assert list(idx.positions) == [1000, 2000]


def test_time_index_only_grows_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    idx = TimeIndex(path, 100)
    assert idx.lookup(5) == (-1, 100)
    idx.maybe_append(1000, 105)
    idx.maybe_append(1000, 107)  # not greater: ignored
    idx.maybe_append(999, 108)
    idx.maybe_append(2000, 120)
    assert len(idx) == 2
    assert idx.lookup(999) == (-1, 100)
    assert idx.lookup(1500) == (1000, 105)
    assert idx.lookup(2000) == (2000, 120)
    idx.write()
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 5, 2000, 20)
    loaded = TimeIndex(path, 100)
    assert loaded.load()
    assert loaded.last_entry() == (2000, 120)
    loaded.truncate_to_offset(120)
    assert loaded.last_entry() == (1000, 105)


def test_time_index_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    idx = TimeIndex(path, 0)
    path.write_bytes(b"\x00" * 13)
    assert not idx.load()
    path.write_bytes(struct.pack(">qiqi", 2000, 5, 1000, 6))  # timestamps go backwards
    assert not idx.load()
    path.write_bytes(struct.pack(">qi", 2000, -3))  # negative relative offset
    assert not idx.load()
    assert len(idx) == 0
