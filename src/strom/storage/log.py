"""PartitionLog: one partition's log (Kafka's UnifiedLog + LocalLog, without the 900 lines).

Owns the segments of ``<log dir>/<topic>-<partition>``, the log start offset, high watermark,
log end offset and recovery point, the producer state and the leader epoch cache. One thread (the
broker's event loop) appends, reads and truncates; ``flush`` may run in another thread at the
same time, so the segment list and flush bookkeeping are changed under a small lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom import clock
from strom.records.batch import (
    HEADER_SIZE,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    InvalidRecordBatch,
    assign_offsets,
    read_header,
    set_log_append_time,
)
from strom.records.codec import iter_timestamps, max_inflated_size
from strom.records.control import Marker, read_marker
from strom.storage.atomic import fsync_dir, fsync_path, sync_data
from strom.storage.errors import CorruptIndex, OffsetOutOfRange
from strom.storage.leader_epoch import LeaderEpochFileCache
from strom.storage.producer_state import ProducerStateManager, list_snapshots
from strom.storage.retention import deletable_segments
from strom.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, iter_headers
from strom.storage.swap import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    complete_swaps,
    rename_segment_files,
    strip_suffix,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = ["AppendInfo", "LogConfig", "OffsetOutOfRange", "PartitionLog"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")
_SWAP_LEFTOVERS = (CLEANED_SUFFIX, SWAP_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _at_zero(header: BatchHeader) -> BatchHeader:
    """The header as if its batch began a buffer (for a batch read on its own from a segment)."""
    return dataclasses.replace(header, position=0)


@dataclass
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes / log.segment.bytes
    segment_ms: int = 604800000  # segment.ms / log.roll.ms
    index_interval_bytes: int = 4096
    flush_interval_messages: int = 2**63 - 1  # flush.messages; 1 = fsync before ack
    flush_interval_ms: int | None = None  # flush.ms (the broker schedules the timed flush)
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    # Compaction (cleanup.policy=compact): see storage.cleaner.
    delete_retention_ms: int = 86400000  # delete.retention.ms: how long tombstones stay
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms: deleted segment files linger this long
    # Replication (read by replication/, not by the log itself).
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy  # the only policy with that name in it (checked per append)

    @property
    def max_segment_ms(self) -> int:
        """Kafka's maxSegmentMs: a compacted log also rolls by max.compaction.lag.ms, so that the
        active segment (never cleaned) cannot hold records past that lag."""
        if self.compact_enabled and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless LogAppendTime
    log_start_offset: int


class PartitionLog:
    def __init__(
        self, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: Callable[[], int],
        *, new: bool = False,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory)
        self.leader_epoch_cache = LeaderEpochFileCache(directory, read=not new)
        self._now_ms = now_ms
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        # Flush bookkeeping, shared with the flushing thread under _lock.
        self._lock = threading.Lock()
        self._unflushed_sealed: list[LogSegment] = []
        self._pending_fsync: list[Path] = []
        self._dir_dirty = False
        self._truncations = 0
        self._closed = False
        # Log bytes after the newest producer snapshot: what a start replays to rebuild producer
        # state from that snapshot. A clean close writes no new snapshot while this is small.
        self._bytes_after_snapshot = 0
        # In a cluster the high watermark is what the whole ISR has, set by replication; on one
        # broker every append is committed at once.
        self.replicated = False
        # Set by the LogManager: takes segments removed from the log (files already renamed to
        # .deleted) and closes and deletes them later, off the event loop. None: delete at once.
        self.deletion_sink: Callable[[list[LogSegment]], None] | None = None
        # Set by the LogManager: told (once, until it resets ``flush_candidate``) that the log has
        # something a timed flush may want, so the flush loop looks at these logs, not at all.
        self.flush_sink: Callable[[PartitionLog], None] | None = None
        self.flush_candidate = False

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # ---- opening and recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        now_ms: Callable[[], int] = clock.now_ms,
        exists: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) a partition directory and recover it.

        After a clean shutdown only index files and the active segment's tail are checked; after
        an unclean one every batch from the segment holding ``recovery_point`` on is re-validated
        and the log is cut at the first bad byte. On one broker the high watermark starts at the
        log end offset. ``exists``: the directory is known to be there (a start lists it).
        """
        if not exists:
            directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, topic, partition, config, now_ms)
        plog._load(recovery_point, log_start_offset, clean_shutdown)
        return plog

    @classmethod
    def create(
        cls, directory: Path, topic: str, partition: int, config: LogConfig, *,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> PartitionLog:
        """A new log in ``directory``, a directory just made and still empty (a CreateTopics):
        what ``open`` would make of it, without its listing, reads and recovery."""
        plog = cls(directory, topic, partition, config, now_ms, new=True)
        plog._set_segments([LogSegment.create(directory, 0, config.index_interval_bytes, now_ms(), lazy=True)])
        return plog

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        names = self._scan_directory()
        with self.leader_epoch_cache.batched():  # one write at most, and none when nothing changed
            self._load_segments(names, recovery_point, log_start_offset, clean_shutdown)
        self._rebuild_producer_state(names)

    def _load_segments(self, names: list[str], recovery_point: int, log_start_offset: int,
                       clean_shutdown: bool) -> None:
        bases = sorted(int(m.group(1)) for name in names if (m := _SEGMENT_FILE.match(name)))
        interval = self.config.index_interval_bytes
        now = self._now_ms()
        if not bases:  # a new log, or one that never had a record: its file waits for one
            self._set_segments([LogSegment.create(self.directory, log_start_offset, interval, now, lazy=True)])
        else:
            self._set_segments([LogSegment.open(self.directory, b, interval, now) for b in bases])
            present = set(names)
            for seg in self._segments:
                if seg.txn_index.path.name not in present:
                    seg.txn_index.known_absent()
        if clean_shutdown:
            first_recovered = len(self._segments) - 1
        else:
            first_recovered = max(bisect_right(self._base_offsets, recovery_point) - 1, 0)
            # Epochs that start in the data being re-validated are re-learnt from its batches.
            self.leader_epoch_cache.truncate_from_end(self._segments[first_recovered].base_offset)
            if bases:  # not for a log created just now
                log.info("%s: unclean shutdown: re-checking %d of %d segments, from offset %d (recovery point %d)",
                         self, len(self._segments) - first_recovered, len(self._segments),
                         self._segments[first_recovered].base_offset, recovery_point)
        self._recover_segments(first_recovered, full=not clean_shutdown)

        active = self._segments[-1]
        self.log_end_offset = active.next_offset
        if clean_shutdown and self.log_end_offset < recovery_point:
            log.warning(
                "%s: log ends at %d but the clean shutdown recorded %d; data was lost while stopped",
                self,
                self.log_end_offset,
                recovery_point,
            )
        self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self._truncate_fully_and_start_at(self.log_start_offset)
        self.recovery_point = (
            self.log_end_offset if clean_shutdown else min(recovery_point, self.log_end_offset)
        )
        self.high_watermark = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def _scan_directory(self) -> list[str]:
        """The directory's file names, after removing temporary leftovers and orphan index files.
        One listing serves the whole load (a start opens thousands of these directories)."""
        names = os.listdir(self.directory)
        if any(name.endswith(_SWAP_LEFTOVERS) for name in names):
            complete_swaps(self.directory)  # a cleaning interrupted by a crash: finish or roll back
            names = os.listdir(self.directory)
        present = {int(m.group(1)) for name in names if (m := _SEGMENT_FILE.match(name))}
        kept = []
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.directory, name))
                continue
            for suffix in _INDEX_SUFFIXES:
                if name.endswith(suffix):
                    stem = name[: -len(suffix)]
                    if not stem.isdigit() or int(stem) not in present:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(self.directory, name))
                        break
            else:
                kept.append(name)
        return kept

    def _recover_segments(self, first_recovered: int, *, full: bool) -> None:
        """Load or re-validate each segment; a segment cut short ends the log there."""
        on_batch = self._learn_epoch
        i = 0
        while i < len(self._segments):
            seg = self._segments[i]
            last = i == len(self._segments) - 1
            cut = 0
            recovered = True
            if i >= first_recovered and full:
                cut = seg.recover(on_batch=on_batch)
                if not cut and seg.index_files_current():
                    seg.indexes_dirty = False  # the same entries as on disk: nothing to write
            elif not seg.load_indexes(verify_tail=last):
                log.info("%s: rebuilding the indexes of segment %d", self, seg.base_offset)
                cut = seg.recover(on_batch=on_batch)
            else:
                # Indexes that agree with the log (load_indexes walked the active segment's tail
                # after its last entry to the end of the file): after a clean stop nothing is
                # re-read, as in Kafka; the files on disk are right, a close need not write them.
                recovered = False
            if cut:
                log.warning("%s: cut %d invalid bytes at the end of segment %d", self, cut, seg.base_offset)
            if not last:
                nxt = self._segments[i + 1]
                if cut or (recovered and nxt.base_offset < seg.next_offset):
                    # Kafka's rule: what follows a damaged segment cannot be trusted either.
                    log.warning(
                        "%s: dropping %d segments after %d",
                        self,
                        len(self._segments) - i - 1,
                        seg.base_offset,
                    )
                    self._delete_segments(self._segments[i + 1 :])
                    continue
                if recovered:
                    seg.seal()  # its max timestamp must survive in the time index, as at a roll
            i += 1

    def _learn_epoch(self, header: BatchHeader) -> None:
        if header.partition_leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _rebuild_producer_state(self, names: list[str] | None = None) -> None:
        """Newest snapshot, then the batch headers after it (no records are decoded, except the one
        marker of each control batch). The aborted-transaction indexes are rebuilt over the same
        range: entries for markers at or after the snapshot are dropped and written again."""
        ps = self.producer_state
        start = max(
            ps.load_latest_snapshot(self.log_start_offset, self.log_end_offset, names), self._segments[0].base_offset
        )
        i = max(bisect_right(self._base_offsets, start) - 1, 0)
        self._bytes_after_snapshot = 0
        for seg in self._segments[i:]:
            seg.txn_index.truncate_to(start)
            position = 0
            if seg.base_offset < start:
                first = self._translate(seg, start)
                if first is None:
                    continue
                position = first.position
            self._bytes_after_snapshot += seg.size - position
            for header in iter_headers(seg.fd, position, seg.size):
                if header.producer_id != NO_PRODUCER_ID and header.next_offset > start:
                    marker = read_marker(seg.read(header.position, header.size), _at_zero(header)) \
                        if header.is_control else None
                    self._track(seg, header, marker)
        ps.map_end_offset = self.log_end_offset
        if names is not None:  # the listing of the start, less what the load deleted
            snapshots = {path.name for _, path in list_snapshots(self.directory, names)}
            names = [name for name in snapshots if (self.directory / name).exists()] \
                if len(snapshots) > 1 else list(snapshots)
        ps.truncate_head(self.log_start_offset, names)

    # ---- the produce path ------------------------------------------------------------------

    def append(self, buf: bytearray | memoryview, headers: list[BatchHeader], leader_epoch: int) -> AppendInfo:
        """Append whole, validated batches (``headers`` from ``iter_batches(buf)``) as one write.

        Offsets and the leader epoch are written into the batch headers; with LogAppendTime the
        broker's clock is stamped too. Producer state is updated here; callers ask
        ``producer_state.check`` first. Work is per batch, never per record.
        """
        first = offset = self.log_end_offset
        if not headers:
            return AppendInfo(first, first - 1, -1, self.log_start_offset)
        log_append_time = self._now_ms() if self.config.message_timestamp_type == "LogAppendTime" else -1
        max_timestamp = log_append_time
        lasts = []
        for h in headers:
            assign_offsets(buf, h, offset, leader_epoch)
            if log_append_time >= 0:
                set_log_append_time(buf, h, log_append_time)
            elif h.max_timestamp > max_timestamp:
                max_timestamp = h.max_timestamp
            offset += h.last_offset_delta + 1
            lasts.append(offset - 1)
        self._write_batches(buf, headers, lasts, max_timestamp, log_append_time)
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first)
        return AppendInfo(first, offset - 1, log_append_time, self.log_start_offset)

    def append_as_follower(self, buf: bytearray | memoryview, headers: list[BatchHeader]) -> int:
        """Append batches copied from the leader, offsets and epochs as the leader assigned them.

        Offsets must increase from the log end offset on (a compacted leader may leave gaps); each
        batch's leader epoch enters the epoch cache, so a later truncation finds where logs diverge.
        Returns the new log end offset.
        """
        if not headers:
            return self.log_end_offset
        expected = self.log_end_offset
        lasts = []
        max_timestamp = -1
        for h in headers:
            if h.base_offset < expected:
                raise ValueError(f"{self}: leader sent offset {h.base_offset}, expected {expected} or more")
            expected = h.next_offset
            lasts.append(h.last_offset)
            max_timestamp = max(max_timestamp, h.max_timestamp)
        self._write_batches(buf, headers, lasts, max_timestamp, -1)
        cache = self.leader_epoch_cache
        for h in headers:
            if h.partition_leader_epoch > cache.latest_epoch:
                cache.assign(h.partition_leader_epoch, h.base_offset)
        return expected

    def _write_batches(self, buf: bytearray | memoryview, headers: list[BatchHeader], lasts: list[int],
                       max_timestamp: int, log_append_time: int) -> None:
        """Write batches (``lasts``: each one's last offset) in one write; index them, track producers."""
        end = lasts[-1] + 1
        if self.leader_epoch_cache.deferred:  # the epoch these records belong to reaches the file first
            self.leader_epoch_cache.write_deferred()
        segment = self._maybe_roll(len(buf), max_timestamp, lasts[-1])
        if not segment.file_made:  # a new log's first record makes its segment file
            segment.make_file()
            with self._lock:
                self._dir_dirty = True
        base_position = segment.write(buf)
        self._bytes_after_snapshot += len(buf)
        for h, last in zip(headers, lasts, strict=True):
            segment.index_batch(
                base_position + h.position, last, log_append_time if log_append_time >= 0 else h.max_timestamp
            )
            if h.producer_id != NO_PRODUCER_ID:
                self._track(segment, read_header(buf, h.position), read_marker(buf, h) if h.is_control else None)
        segment.next_offset = end
        # Data is written before the end moves: a concurrent flush never claims unwritten bytes.
        self.log_end_offset = end
        if not self.flush_candidate:
            self._flush_candidate()
        self.producer_state.map_end_offset = end
        if not self.replicated:
            self.high_watermark = end  # in a cluster the ISR moves it (replication.partition)

    def _track(self, segment: LogSegment, header: BatchHeader, marker: Marker | None) -> None:
        """Producer state for one batch; an ABORT marker enters its segment's transaction index."""
        ps = self.producer_state
        completed = ps.update(header, marker)
        if completed is not None and completed.is_aborted:
            segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                completed.last_offset, ps.last_stable_offset_after(completed)))

    # ---- transactions ----------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: the oldest open transaction's first offset, at
        most the high watermark. read_committed consumers read up to here."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the segment holding
        ``fetch_offset`` on (a marker always follows its transaction's first offset)."""
        found: list[AbortedTxn] = []
        i = max(bisect_right(self._base_offsets, fetch_offset) - 1, 0)
        for seg in self._segments[i:]:
            if seg.base_offset >= upper_bound and found:
                break
            txns, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            found += txns
            if complete:
                break
        return found

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.size == 0:
            return segment
        config = self.config
        if (
            segment.size + size > config.segment_bytes
            or not segment.fits_relative(last_offset)
            or self._waited_for_roll(segment, max_timestamp) > config.max_segment_ms
        ):
            return self.roll()
        return segment

    def _waited_for_roll(self, segment: LogSegment, max_timestamp: int) -> int:
        # Kafka measures segment.ms from the first batch's timestamp when there is one.
        rolling = segment.rolling_timestamp()
        if rolling is not None and rolling >= 0:
            return max_timestamp - rolling
        return self._now_ms() - segment.created_ms

    def roll(self) -> LogSegment:
        """Seal the active segment (indexes, producer snapshot) and start one at the log end."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        old.seal()
        snapshot = self.producer_state.take_snapshot()
        self._bytes_after_snapshot = 0
        new = LogSegment.create(
            self.directory, self.log_end_offset, self.config.index_interval_bytes, self._now_ms()
        )
        with self._lock:
            self._segments.append(new)
            self._base_offsets.append(new.base_offset)
            self._unflushed_sealed.append(old)
            self._pending_fsync += [old.offset_index.path, old.time_index.path, snapshot]
            if old.txn_index.entries:
                self._pending_fsync.append(old.txn_index.path)
            self._dir_dirty = True
        if not self.flush_candidate:
            self._flush_candidate()
        return new

    def _flush_candidate(self) -> None:
        if self.flush_sink is not None:
            self.flush_candidate = True
            self.flush_sink(self)

    # ---- durability ------------------------------------------------------------------------

    def needs_flush(self) -> bool:
        return self.log_end_offset - self.recovery_point >= self.config.flush_interval_messages

    def has_unflushed_sealed(self) -> bool:
        """A segment was rolled since the last flush. Kafka flushes a log at each roll, so the
        recovery point keeps up with sealed segments and an unclean start re-checks only the tail."""
        return bool(self._unflushed_sealed)

    def flush(self) -> None:
        """fsync what was written up to now and advance the recovery point. Blocking; may run in
        a thread while the loop appends (file handles are duplicated under the lock)."""
        with self._lock:
            if self._closed:
                return
            target = self.log_end_offset
            truncations = self._truncations
            segments = [*self._unflushed_sealed, self._segments[-1]]
            self._unflushed_sealed = []
            files, self._pending_fsync = self._pending_fsync, []
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            fds = [os.dup(s.fd) for s in segments if s.fd >= 0]
        try:
            for fd in fds:
                sync_data(fd)
        finally:
            for fd in fds:
                os.close(fd)
        for path in files:
            fsync_path(path)
        self.leader_epoch_cache.flush()
        if dir_dirty:
            fsync_dir(self.directory)
        with self._lock:
            # A truncation meanwhile may have replaced flushed offsets with unflushed ones.
            if truncations == self._truncations and target > self.recovery_point:
                self.recovery_point = target

    # ---- the fetch path --------------------------------------------------------------------

    def read(
        self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        """Whole batches from the one holding ``fetch_offset``, up to ``max_bytes`` (at least one
        batch if ``min_one_batch``), none holding ``max_offset`` (default: high watermark) or later.
        Reads a single segment, like Kafka; the client asks again for the rest."""
        end_offset = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > end_offset:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: offset {fetch_offset} not in "
                f"[{self.log_start_offset}, {end_offset}]"
            )
        limit = self.high_watermark if max_offset is None else min(max_offset, end_offset)
        segments = self._segments
        i = max(bisect_right(self._base_offsets, fetch_offset) - 1, 0)
        while i < len(segments) and fetch_offset < limit:
            seg = segments[i]
            first = self._translate(seg, fetch_offset)
            if first is None:  # a gap in offsets: the data continues in the next segment
                i += 1
                continue
            if first.last_offset >= limit:
                return b""
            start = first.position
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end_offset
            if limit >= next_base:
                end = seg.size
            else:
                bound = self._translate(seg, limit, start)
                end = bound.position if bound is not None else seg.size
            if max_bytes < first.size:
                return seg.read(start, first.size) if min_one_batch else b""
            want = min(end, start + max_bytes)
            if want < end:  # cut at a batch boundary first, so the bytes are read (and copied) once
                want = seg.last_boundary(start, want)
            return seg.read(start, want - start)
        return b""

    def _translate(self, seg: LogSegment, offset: int, start_position: int = 0) -> BatchHeader | None:
        try:
            return seg.translate_offset(offset, start_position)
        except CorruptIndex as exc:
            log.warning("%s: %s; rebuilding the index", self, exc)
            seg.rebuild_index()
            return seg.translate_offset(offset, start_position)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start with timestamp >=
        ``timestamp_ms``; None if there is none. Not the hot path: walks one batch's records, a
        compressed one decompressed a chunk at a time. A batch that cannot be read that way (corrupt,
        or decompressing past codec.max_inflated_size) is answered for as a whole: its first offset
        and its max timestamp."""
        start_offset = self.log_start_offset
        max_size = max_inflated_size(self.config.max_message_bytes)
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms or seg.size == 0:
                continue
            _, indexed_offset = seg.time_index.lookup(timestamp_ms)
            position = seg.offset_index.lookup(max(indexed_offset, start_offset))
            chunk = 2 * seg.index_interval_bytes + HEADER_SIZE
            for h in iter_headers(seg.fd, position, seg.size, chunk=chunk):
                if h.max_timestamp < timestamp_ms or h.last_offset < start_offset:
                    continue
                data = seg.read(h.position, h.size)
                header = read_header(data)
                log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
                try:
                    for offset, record_ts in iter_timestamps(data, header, max_size):
                        ts = header.max_timestamp if log_append_time else record_ts
                        if ts >= timestamp_ms and offset >= start_offset:
                            return offset, ts
                except InvalidRecordBatch as e:
                    log.warning("%s: batch at offset %d answered as a whole for a timestamp lookup: %s",
                                self, header.base_offset, e)
                    return max(header.base_offset, start_offset), header.max_timestamp
        return None

    # ---- moving the ends -------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> None:
        """For replication: the high watermark, kept within [log start, log end]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove everything from the batch holding ``offset`` on (Kafka's truncateTo)."""
        if offset >= self.log_end_offset:
            return
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._truncations += 1
        if offset < self.log_start_offset:
            self._truncate_fully_and_start_at(offset)
            return
        self._delete_segments([s for s in self._segments if s.base_offset > offset])
        active = self._segments[-1]
        active.truncate_to(offset)
        self._after_truncation(active.next_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it at ``offset`` (a follower behind the leader's log start)."""
        with self._lock:
            self._truncations += 1
        self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            self._truncations += 1
            for seg in self._segments:
                seg.delete()
            self._segments = [
                LogSegment.create(self.directory, offset, self.config.index_interval_bytes, self._now_ms())
            ]
            self._base_offsets = [offset]
            self._unflushed_sealed = []
            self._dir_dirty = True
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_snapshots_after(-1)
        self._after_truncation(offset)

    def _after_truncation(self, end_offset: int) -> None:
        self.log_end_offset = end_offset
        # Cutting the batch that held the log start leaves nothing at or after it.
        self.log_start_offset = min(self.log_start_offset, end_offset)
        self.recovery_point = min(self.recovery_point, end_offset)
        self.high_watermark = min(self.high_watermark, end_offset)
        self.leader_epoch_cache.truncate_from_end(end_offset)
        self.producer_state.delete_snapshots_after(end_offset)
        self._rebuild_producer_state()

    def delete_records(self, new_start: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it are deleted."""
        if new_start > self.high_watermark:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: cannot delete records up to {new_start}, "
                f"high watermark is {self.high_watermark}"
            )
        self.advance_log_start_offset(new_start)

    def advance_log_start_offset(self, new_start: int) -> None:
        """Move the log start forward (at most to the log end); whole segments below it go. A
        follower calls it to follow the leader's log start (retention, DeleteRecords)."""
        new_start = min(new_start, self.log_end_offset)
        if new_start <= self.log_start_offset:
            return
        self.log_start_offset = new_start
        self.high_watermark = max(self.high_watermark, new_start)
        self._delete_segments(
            [s for s, nxt in zip(self._segments, self._base_offsets[1:], strict=False) if nxt <= new_start])
        self._after_log_start_moved()

    def delete_old_segments(self) -> int:
        """Retention (retention.ms, retention.bytes) and the log start offset: delete whole old
        segments, never data above the high watermark. Returns how many segments were deleted."""
        segments = self._segments
        count = deletable_segments(
            segments,
            [*self._base_offsets[1:], self.log_end_offset],
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            config=self.config,
            now_ms=self._now_ms(),
        )
        if not count:
            return 0
        doomed = segments[:count]
        if count == len(segments):
            self.roll()  # the active segment goes too: give the log a new one first
        self._delete_segments(doomed)
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self._after_log_start_moved()
        return count

    def _after_log_start_moved(self) -> None:
        self.recovery_point = max(self.recovery_point, min(self.log_start_offset, self.log_end_offset))
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.truncate_head(self.log_start_offset)
        self.producer_state.delete_snapshots_before(self._segments[0].base_offset)

    # ---- segments --------------------------------------------------------------------------

    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _set_segments(self, segments: list[LogSegment]) -> None:
        with self._lock:
            self._segments = segments
            self._base_offsets = [s.base_offset for s in segments]

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        """Delete segments (under the lock, so a concurrent flush never sees a closed handle)."""
        if not doomed:
            return
        ids = {id(s) for s in doomed}
        with self._lock:
            remaining = [s for s in self._segments if id(s) not in ids]
            if not remaining:
                raise AssertionError("a log keeps at least one segment")
            self._segments = remaining
            self._base_offsets = [s.base_offset for s in remaining]
            self._unflushed_sealed = [s for s in self._unflushed_sealed if id(s) not in ids]
            if self.deletion_sink is None:
                for seg in doomed:
                    seg.delete()
            self._dir_dirty = True
        if self.deletion_sink is not None:
            self.dispose_segments(doomed, renamed=False)

    def dispose_segments(self, doomed: list[LogSegment], *, renamed: bool = True) -> None:
        """Delete segments already removed from the log: through the deletion sink if there is one
        (files renamed to .deleted now, closed and removed later off the loop), else at once."""
        if self.deletion_sink is None:
            for seg in doomed:
                seg.delete()
            return
        if not renamed:
            for seg in doomed:
                rename_segment_files(seg, DELETED_SUFFIX)
        self.deletion_sink(doomed)

    # ---- compaction support (storage.cleaner) ----------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def pin_closed_segments(self, end_offset: int) -> tuple[list[tuple[LogSegment, int]], int]:
        """For the cleaner, on the owner thread: (segment, a duplicate of its file descriptor) for
        every closed segment with base offset below ``end_offset``, and the truncation count to hand
        back to ``replace_segments``. The duplicates stay valid whatever happens to the segments;
        the caller closes them."""
        with self._lock:
            pinned = [(s, os.dup(s.fd)) for s in self._segments[:-1] if s.base_offset < end_offset]
            return pinned, self._truncations

    def replace_segments(
        self,
        old: list[LogSegment],
        new: LogSegment,
        *,
        truncations: int,
        on_step: Callable[[str], None] | None = None,
    ) -> list[LogSegment] | None:
        """Swap a cleaned segment in for ``old`` (consecutive closed segments; ``new`` is written as
        ``.cleaned`` files with its final paths as names), Kafka's replaceSegments: .cleaned ->
        .swap, old files -> .deleted, .swap -> final names, then the segment list. Runs on the owner
        thread. Returns the replaced segments (for ``dispose_segments``), or None when the log
        changed meanwhile (truncated, closed, segments deleted): the caller discards ``new``."""
        step = on_step or (lambda _step: None)
        with self._lock:
            if self._closed or truncations != self._truncations or not old:
                return None
            ids = [id(s) for s in self._segments]
            try:
                i = ids.index(id(old[0]))
            except ValueError:
                return None
            if ids[i : i + len(old)] != [id(s) for s in old] or i + len(old) >= len(ids):
                return None
        paths = [new.offset_index.path, new.time_index.path, new.log_path]  # the .log last
        # The aborted transactions whose markers the cleaner kept: to .swap before the .log (a
        # .log.swap means all is there) and out of it after the .log (a .txnindex.swap without a
        # .log.swap then means the .log is in place), so complete_swaps can always tell.
        txn_paths = [new.txn_index.path] if new.txn_index.entries else []
        for path in [*paths[:2], *txn_paths, paths[2]]:
            os.replace(path.with_name(path.name + CLEANED_SUFFIX), path.with_name(path.name + SWAP_SUFFIX))
        step("swap")
        for n, seg in enumerate(old):
            rename_segment_files(seg, DELETED_SUFFIX)
            if n == 0:
                step("deleted-partial")
        step("deleted")
        for path in [*paths, *txn_paths]:
            strip_suffix(path.with_name(path.name + SWAP_SUFFIX), SWAP_SUFFIX)
        step("replaced")
        ids_old = {id(s) for s in old}
        with self._lock:
            self._segments[i : i + len(old)] = [new]
            self._base_offsets = [s.base_offset for s in self._segments]
            self._unflushed_sealed = [s for s in self._unflushed_sealed if id(s) not in ids_old]
            self._dir_dirty = True
        return old

    # ---- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Clean close: final index entries, a producer snapshot at the log end, then the handles;
        a log unchanged since it was loaded writes nothing. Call ``flush`` first for the data itself
        to be durable.

        What is fsynced is what the next start trusts without checking. Index files only extended
        or made need no fsync (IndexWrite). Kafka writes a snapshot at every close so that a start
        need not scan the log; with no more than index.interval.bytes after the newest snapshot
        the start's replay reads no more than its index check of the active segment does, so that
        snapshot is not written (producer state is the snapshot's plus the batches after it)."""
        if self._closed:
            return
        must_sync: list[Path] = []
        for seg in self._segments:
            if seg.indexes_dirty:
                must_sync += seg.seal()
        self.producer_state.map_end_offset = self.log_end_offset
        if self._bytes_after_snapshot > self.config.index_interval_bytes:  # so past the last one
            must_sync.append(self.producer_state.take_snapshot())
            self._bytes_after_snapshot = 0
        self.leader_epoch_cache.flush()
        for path in must_sync:
            fsync_path(path)
        if must_sync:
            fsync_dir(self.directory)
        self.close_handlers()

    @property
    def unflushed(self) -> bool:
        """Something written is not yet known durable: data past the recovery point, a segment
        sealed or a file made or removed since the last flush."""
        return (self.recovery_point < self.log_end_offset or bool(self._unflushed_sealed)
                or bool(self._pending_fsync) or self._dir_dirty or self.leader_epoch_cache.needs_fsync)

    def close_handlers(self) -> None:
        """Close file handles without writing anything (Kafka's closeHandlers): for logs being
        deleted, and for tests that simulate a crash."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close()
