"""PartitionLog: append, read, rolling, timestamps, truncation, DeleteRecords, retention, flush."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from storage_helpers import append, batch, read_everything, records, values

from strom.records.batch import iter_batches, read_header
from strom.records.codec import GZIP, read_all
from strom.storage.log import LogConfig, OffsetOutOfRange, PartitionLog


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(path: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "t-0", "t", 0, LogConfig(**config), now_ms=clock or Clock())  # type: ignore[arg-type]


def test_append_assigns_offsets_and_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = append(log, batch(3), leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.log_append_time, info.log_start_offset) == (0, 2, -1, 0)
    info = append(log, batch(2), batch(1), leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (3, 5)
    assert log.log_end_offset == log.high_watermark == 6
    data = log.read(0, 1 << 20)
    headers = iter_batches(data)  # CRCs still valid: offsets and epoch are outside the CRC
    assert [h.base_offset for h in headers] == [0, 3, 5]
    assert {h.partition_leader_epoch for h in headers} == {4}
    assert [r.offset for r in read_all(data)] == list(range(6))
    assert log.leader_epoch_cache.latest_epoch == 4
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()


def test_new_log_makes_its_files_at_its_first_record(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    log = PartitionLog.create(directory, "t", 0, LogConfig(), now_ms=Clock())
    log.leader_epoch_cache.assign(2, 0, defer=True)
    assert log.read(0, 1000) == b"" and log.log_end_offset == 0 and not log.unflushed
    log.close()  # no record: no file at all, and the next start assigns the epoch again
    assert list(directory.iterdir()) == []
    log = PartitionLog.open(directory, "t", 0, LogConfig(), now_ms=Clock(), clean_shutdown=True)
    assert log.leader_epoch_cache.entries == [] and log.log_end_offset == 0
    log.leader_epoch_cache.assign(2, 0, defer=True)
    append(log, batch(2), leader_epoch=2)  # the first record makes the segment file, after the epoch
    assert sorted(p.name for p in directory.iterdir()) == ["00000000000000000000.log", "leader-epoch-checkpoint"]
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n1\n2 0\n"
    assert log.unflushed
    log.close_handlers()  # a crash: recovery finds the same epoch in the file and in the batches
    again = PartitionLog.open(directory, "t", 0, LogConfig(), now_ms=Clock())
    assert [tuple(e) for e in again.leader_epoch_cache.entries] == [(2, 0)] and again.log_end_offset == 2


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(5_000)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = append(log, batch(2, ts=10))
    assert info.log_append_time == 5_000
    (h,) = iter_batches(log.read(0, 1000))
    assert h.max_timestamp == 5_000 and h.attributes & 0x08
    assert log.offset_for_timestamp(4_000) == (0, 5_000)


def test_read_limits(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for _ in range(10):
        b = batch(2, value=b"x" * 50)
        sizes.append(len(b))
        append(log, b)
    size = sizes[0]
    assert len(log.read(0, 3 * size + 10)) == 3 * size  # whole batches only
    assert len(log.read(5, 3 * size)) == 3 * size  # starts with the batch holding offset 5
    assert iter_batches(log.read(5, size))[0].base_offset == 4
    assert len(log.read(0, 10)) == size  # at least one batch...
    assert log.read(0, 10, min_one_batch=False) == b""  # ...unless the caller has already filled its response
    assert len(log.read(0, 1 << 20, max_offset=6)) == 3 * size  # nothing at or after max_offset
    assert log.read(6, 1 << 20, max_offset=6) == b""
    assert log.read(20, 1 << 20) == b""  # at the log end: nothing yet
    with pytest.raises(OffsetOutOfRange):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)


def test_read_stops_at_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(2))
    append(log, batch(2))
    log.update_high_watermark(2)  # as a leader waiting for followers would
    assert [h.base_offset for h in iter_batches(log.read(0, 1 << 20))] == [0]
    assert log.read(2, 1 << 20) == b""
    assert len(iter_batches(log.read(2, 1 << 20, max_offset=4))) == 1


def test_roll_on_segment_bytes_and_read_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, index_interval_bytes=100)
    for i in range(40):
        append(log, batch(2, value=b"%03d" % i + b"y" * 40))
    segs = log.segments()
    assert len(segs) > 5
    assert all(s.size <= 500 for s in segs)
    assert [s.base_offset for s in segs] == sorted(s.base_offset for s in segs)
    assert len(values(log)) == 80
    assert [r.offset for r in records(log)] == list(range(80))
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    for seg in segs[1:]:
        assert f"{seg.base_offset:020d}.snapshot" in names


def test_roll_on_segment_ms(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_ms=1000)
    append(log, batch(1, ts=10_000))
    append(log, batch(1, ts=10_900))
    assert len(log.segments()) == 1
    append(log, batch(1, ts=11_001))  # more than segment.ms after the segment's first batch
    assert [s.base_offset for s in log.segments()] == [0, 2]

    untimed = open_log(tmp_path / "b", clock, segment_ms=1000)
    append(untimed, batch(1, ts=-1))  # no timestamps: Kafka counts from the segment's creation
    clock.now += 1000
    append(untimed, batch(1, ts=-1))
    clock.now += 1
    append(untimed, batch(1, ts=-1))
    assert [s.base_offset for s in untimed.segments()] == [0, 2]


def test_offset_for_timestamp_finds_the_first_record(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    # Timestamps not monotonic inside batches; CreateTime, compressed batches too.
    append(log, batch(3, timestamps=[100, 300, 200]))
    append(log, batch(2, timestamps=[250, 260], codec=GZIP))
    for i in range(20):
        append(log, batch(2, timestamps=[1000 + 10 * i, 1005 + 10 * i]))
    assert log.offset_for_timestamp(50) == (0, 100)
    assert log.offset_for_timestamp(150) == (1, 300)
    assert log.offset_for_timestamp(255) == (1, 300)
    assert log.offset_for_timestamp(301) == (5, 1000)
    assert log.offset_for_timestamp(1096) == (25, 1100)
    assert log.offset_for_timestamp(1195) == (44, 1195)
    assert log.offset_for_timestamp(1196) is None
    log.delete_records(2)
    assert log.offset_for_timestamp(150) == (2, 200)  # never below the log start
    log.delete_records(3)
    assert log.offset_for_timestamp(150) == (3, 250)


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(20):
        append(log, batch(2, value=b"%02d" % i))
    log.flush()
    log.truncate_to(25)  # inside batch 24..25: the whole batch goes
    assert log.log_end_offset == log.high_watermark == 24
    assert log.recovery_point == 24
    assert len(values(log)) == 24
    assert all(s.base_offset <= 24 for s in log.segments())
    info = append(log, batch(1, value=b"new"))
    assert info.first_offset == 24
    assert values(log)[-1] == b"new0"
    log.truncate_to(0)
    assert log.log_end_offset == 0 and len(log.segments()) == 1
    assert append(log, batch(1)).first_offset == 0


def test_delete_records(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for _ in range(20):
        append(log, batch(2))
    first_bases = [s.base_offset for s in log.segments()]
    log.delete_records(17)
    assert log.log_start_offset == 17
    assert all(b not in [s.base_offset for s in log.segments()] for b in first_bases if b + 10 <= 17)
    assert log.segments()[0].base_offset <= 17
    with pytest.raises(OffsetOutOfRange):
        log.read(16, 100)
    assert records(log)[0].offset == 16  # the batch holding 17 is returned whole (16..17)
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(41)
    log.delete_records(5)  # backwards: nothing happens
    assert log.log_start_offset == 17


def test_retention_by_time_and_size(tmp_path: Path) -> None:
    clock = Clock(100_000)
    log = open_log(tmp_path, clock, segment_bytes=300, retention_ms=10_000)
    for i in range(10):
        append(log, batch(2, ts=80_000 + i * 1000))
    n_segments = len(log.segments())
    clock.now = 90_000  # the oldest batch is exactly 10 s old: nothing is past retention yet
    assert log.delete_old_segments() == 0
    clock.now = 95_000
    old_maxima = [s.max_timestamp for s in log.segments()]
    deleted = log.delete_old_segments()
    assert 0 < deleted < n_segments
    # Kafka's rule: the oldest segments, as long as their newest record is past retention.
    assert all(ts < 85_000 for ts in old_maxima[:deleted])
    assert old_maxima[deleted] >= 85_000
    assert log.log_start_offset == log.segments()[0].base_offset
    clock.now = 10**9  # everything expired: the active segment is rolled and goes too
    log.delete_old_segments()
    assert log.log_start_offset == log.log_end_offset == 20
    assert [s.size for s in log.segments()] == [0]
    assert append(log, batch(1)).first_offset == 20

    sized = open_log(tmp_path / "b", segment_bytes=300, retention_ms=-1, retention_bytes=600)
    for _ in range(10):
        append(sized, batch(2))
    sized.delete_old_segments()
    assert sized.size_bytes() <= 600 + 300
    assert sized.size_bytes() > 600 - 300


def test_flush_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_interval_messages=3)
    append(log, batch(2))
    assert not log.needs_flush()
    append(log, batch(1))
    assert log.needs_flush()
    log.flush()
    assert log.recovery_point == 3
    assert not log.needs_flush()


def test_flush_in_a_thread_while_appending(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            append(log, batch(1, value=b"%d" % i))
            if i % 97 == 0:
                log.truncate_to(log.log_end_offset - 1)
    finally:
        stop.set()
        t.join(10)
    assert not errors
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert len(values(log)) == log.log_end_offset


def test_producer_state_updated_by_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(1))
    info = append(log, batch(3, producer_id=7, producer_epoch=0, base_sequence=0))
    entry = log.producer_state.producers[7]
    assert entry.batches[-1].first_offset == info.first_offset == 1
    assert entry.batches[-1].last_seq == 2
    dup = read_header(batch(3, producer_id=7, producer_epoch=0, base_sequence=0))
    assert log.producer_state.check(dup).first_offset == 1


def test_close_and_reopen_clean(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    for i in range(30):
        append(log, batch(2, value=b"%02d" % i, ts=1000 + i))
    before = read_everything(log)
    log.flush()
    log.close()
    again = PartitionLog.open(
        tmp_path / "t-0",
        "t",
        0,
        LogConfig(segment_bytes=400, index_interval_bytes=100),
        recovery_point=60,
        clean_shutdown=True,
    )
    assert again.log_end_offset == 60 and again.recovery_point == 60
    assert read_everything(again) == before
    assert again.offset_for_timestamp(1029) == (58, 1029)
