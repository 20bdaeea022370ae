"""The log cleaner: compaction of logs with cleanup.policy=compact (Kafka's LogCleaner).

One background thread picks the "filthiest" compacted log, builds a map key -> latest offset over its
dirty part, rewrites its closed segments keeping only the latest record of each key, and swaps the
cleaned segments in. The event loop keeps appending to the active segment meanwhile; the cleaner
reads closed segments through file descriptors of its own (``os.dup``), and every step that looks at
or changes the log's segment list runs on the thread that owns the log (the broker's event loop),
handed over through ``run_on_owner``. Nothing the loop does waits for the cleaner.

What is cleanable (as in Kafka's LogCleanerManager):

- the dirty part starts at the first dirty offset (``cleaner-offset-checkpoint`` in each log
  directory; the log start offset when unknown) and ends at the first uncleanable offset: the active
  segment's base offset, the high watermark, or the first segment whose newest record is younger than
  min.compaction.lag.ms, whichever is lowest;
- a log is cleaned when its dirty bytes over all its bytes exceed min.cleanable.dirty.ratio, or when
  its oldest dirty record is older than max.compaction.lag.ms, or when tombstones the cleaner marked
  earlier have passed their delete horizon.

How a record is kept (Kafka's rules): it has a key, and no later record in the dirty part has that
key; a tombstone (null value) is kept until delete.retention.ms after the cleaning that first saw it
(KIP-534 delete horizon, kept in the batch header). Records without a key are removed. Offsets never
change: compaction leaves gaps. The batch holding the last write of each active idempotent producer
is always kept, empty if need be, so its producer id, epoch and last sequence survive.

Transactions (Kafka's CleanedTransactionMetadata): the records of aborted transactions are dropped
and never count as a key's latest. A transaction marker stays while any batch of its transaction is
still in the log (the batches are walked in offset order from the log start, so the whole log is
seen in one pass); once none is, the marker gets a delete horizon of delete.retention.ms, like a
tombstone, and a later cleaning after that horizon removes it. A kept ABORT marker keeps its entry
in the cleaned segment's ``.txnindex``, so the next cleaning still knows which batches it aborted.

Cleaned segments are written as ``.cleaned`` files, fsynced, then swapped in by
``PartitionLog.replace_segments`` (``.cleaned`` -> ``.swap`` -> ``.log``, see ``storage.swap``), so
a crash at any point leaves either the old segments or the new one.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from strom import clock
from strom.records.batch import BatchHeader, read_header
from strom.records.codec import max_inflated_size
from strom.records.control import read_marker
from strom.records.filter import (
    FilterResult,
    RawRecord,
    build_filtered,
    delete_horizon,
    filter_batch,
    parse_records,
)
from strom.storage.atomic import fsync_dir
from strom.storage.checkpoint import OffsetCheckpointFile
from strom.storage.segment import LOG_SUFFIX, LogSegment, file_name, iter_headers
from strom.storage.swap import CLEANED_SUFFIX
from strom.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from strom.storage.log import LogConfig, PartitionLog
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# Kafka's SkimpyOffsetMap spends 24 bytes per key (16-byte hash + 8-byte offset): the dedupe buffer
# bounds the number of keys one cleaning round may hold the same way.
_BYTES_PER_MAP_ENTRY = 24
_MAX_RELATIVE_OFFSET = 2**31 - 1

T = TypeVar("T")
TopicPartition = tuple[str, int]

# ---- test hook -------------------------------------------------------------------------------------
# TEST HOOK, not a feature: with the (hidden, undocumented) broker property
# ``strom.test.cleaner.crash.point=<step>`` the cleaner SIGKILLs its own process when it reaches that
# step of a swap, so tests can check that a crash at each step leaves a valid log. Steps, in order:
CRASH_POINT_CONFIG = "strom.test.cleaner.crash.point"
CRASH_POINTS = ("cleaned", "swap", "deleted-partial", "deleted", "replaced")


def crash_hook(point: str | None) -> Callable[[str], None] | None:
    if not point:
        return None

    def hook(step: str) -> None:
        if step == point:
            log.warning(
                "TEST HOOK %s=%s: killing the broker at this step of a swap", CRASH_POINT_CONFIG, step
            )
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


# ---- configuration ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-wide cleaner settings (Kafka's log.cleaner.*); per-log settings are in LogConfig."""

    enabled: bool = True
    backoff_ms: int = 15000  # log.cleaner.backoff.ms: sleep when nothing is cleanable
    dedupe_buffer_size: int = 134217728  # log.cleaner.dedupe.buffer.size
    io_buffer_size: int = 524288  # log.cleaner.io.buffer.size: write buffer of a cleaned segment
    io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor: share of the map that is used
    io_max_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second
    crash_point: str | None = None  # TEST HOOK, see CRASH_POINT_CONFIG

    @property
    def max_map_entries(self) -> int:
        return max(1, int(self.dedupe_buffer_size * self.io_buffer_load_factor) // _BYTES_PER_MAP_ENTRY)


# ---- what to clean ---------------------------------------------------------------------------------


@dataclass
class CleanableInfo:
    """Kafka's LogToClean: the dirty part of one log and how dirty it is."""

    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    need_now: bool  # a dirty record is older than max.compaction.lag.ms
    tombstones_due: bool = False  # tombstones the cleaner kept have reached their delete horizon

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def cleanable(self, min_ratio: float) -> bool:
        if self.dirty_bytes > 0 and (self.need_now or self.ratio > min_ratio):
            return True
        return self.tombstones_due and self.clean_bytes > 0


def cleanable_info(
    plog: PartitionLog, first_dirty: int | None, now_ms: int, tombstone_expiry: int | None = None
) -> CleanableInfo:
    """Where the dirty part of ``plog`` starts and ends (run on the log's owner thread)."""
    config = plog.config
    segments = plog.segments()
    start = plog.log_start_offset
    if first_dirty is None or first_dirty < start or first_dirty > plog.log_end_offset:
        first_dirty = start
    active = segments[-1]
    # Never past the last stable offset (an undecided transaction's records are not cleaned, Kafka's
    # rule), and only whole segments: the one holding the LSO waits until the LSO has left it.
    lso = plog.last_stable_offset
    uncleanable = min(active.base_offset, max((s.base_offset for s in segments if s.base_offset <= lso),
                                              default=segments[0].base_offset))
    bounds = [s.base_offset for s in segments[1:]] + [plog.log_end_offset]
    dirty = [(s, end) for s, end in zip(segments[:-1], bounds, strict=False) if end > first_dirty]
    if config.min_compaction_lag_ms > 0:
        for seg, _ in dirty:
            if seg.largest_timestamp() > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    uncleanable = max(uncleanable, first_dirty)
    # Bytes wholly below the first dirty offset are clean; segments overlapping the dirty part are dirty.
    clean_bytes = sum(s.size for s, end in zip(segments[:-1], bounds, strict=False) if end <= first_dirty)
    dirty_segments = [s for s, _ in dirty if s.base_offset < uncleanable]
    dirty_bytes = sum(s.size for s in dirty_segments)
    need_now = False
    if config.max_compaction_lag_ms > 0 and dirty_segments:
        earliest = min(
            (t for s in dirty_segments if (t := s.rolling_timestamp()) is not None and t >= 0), default=None
        )
        if earliest is not None and earliest < now_ms - config.max_compaction_lag_ms:
            need_now = True
    due = tombstone_expiry is not None and tombstone_expiry <= now_ms
    return CleanableInfo(plog, first_dirty, uncleanable, clean_bytes, dirty_bytes, need_now, due)


# ---- one cleaning ----------------------------------------------------------------------------------


@dataclass
class SegmentView:
    """A closed segment as the cleaner sees it: its own file descriptor and fixed bounds."""

    segment: LogSegment
    fd: int
    size: int
    base_offset: int
    end_offset: int  # the next segment's base offset


@dataclass
class CleaningJob:
    """Everything a cleaning round needs, taken on the owner thread at its start."""

    info: CleanableInfo
    views: list[SegmentView]
    truncations: int
    producer_last_offsets: dict[int, int]
    config: LogConfig
    now_ms: int
    # Aborted transactions over the cleaned range: their records are dropped and never count as a
    # key's latest (an aborted transactional offset commit must not shadow a committed one).
    aborted: list[AbortedTxn] = field(default_factory=list)

    def is_aborted(self, header: BatchHeader) -> bool:
        if not self.aborted or not header.is_transactional or header.is_control:
            return False
        pid, offset = header.producer_id, header.base_offset
        return any(t.producer_id == pid and t.first_offset <= offset <= t.last_offset for t in self.aborted)

    @property
    def log(self) -> PartitionLog:
        return self.info.log

    def close(self) -> None:
        for v in self.views:
            if v.fd >= 0:
                os.close(v.fd)
                v.fd = -1


@dataclass
class _AbortedTxnState:
    txn: AbortedTxn
    observed: bool = False  # a batch of it is still in the log


class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: which transaction each batch of a cleaning pass belongs
    to, fed the batches in offset order. Decides whether a data batch's records are aborted and
    whether a marker may go (no batch of its transaction was met since the previous marker of its
    producer: they were all removed by earlier cleanings)."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (its records go)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted.observed = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_marker(self, data: bytes, header: BatchHeader) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (whether it may be removed, the aborted transaction to keep in the
        cleaned ``.txnindex`` when an ABORT marker stays)."""
        self._consume_aborted_up_to(header.last_offset)
        if header.records_count == 0:
            return True, None  # emptied by an earlier cleaning
        marker = read_marker(data, header)
        if marker is None:
            return False, None  # a control record of another kind: kept
        pid = header.producer_id
        if marker.is_commit:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False, None
            return True, None
        aborted = self._ongoing_aborted.pop(pid, None)
        if aborted is not None and aborted.observed:
            return False, aborted.txn
        return True, None


def filter_marker(data: bytes, header: BatchHeader, removable: bool, now_ms: int,
                  delete_retention_ms: int) -> FilterResult:
    """A marker that may go is first given a delete horizon (now + delete.retention.ms: consumers
    that are reading the log still see it) and removed by a cleaning after that horizon."""
    if not removable:
        return FilterResult(data, header.records_count, 0, None)
    if header.records_count == 0:
        return FilterResult(None, 0, 0, None)  # an emptied control batch: nothing left to show
    horizon = delete_horizon(header)
    if horizon is None:
        horizon = now_ms + delete_retention_ms
        return FilterResult(build_filtered(header, parse_records(data, header), horizon), header.records_count, 0,
                            horizon)
    if now_ms >= horizon:
        return FilterResult(None, 0, header.records_count, None)
    return FilterResult(data, header.records_count, 0, horizon)


@dataclass
class CleanerStats:
    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_removed: int = 0
    keys: int = 0
    aborted: bool = False
    tombstone_expiry: int | None = None
    elapsed_ms: float = 0.0


class CleanerStopped(Exception):
    """The cleaner is shutting down; the round in progress is abandoned (nothing was swapped)."""


@dataclass
class _Throttle:
    rate: float
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def add(self, n: int, stop: threading.Event) -> None:
        if self.rate == float("inf") or self.rate <= 0:
            return
        self.done += n
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            stop.wait(min(ahead, 1.0))


def build_offset_map(
    job: CleaningJob, max_entries: int, stop: threading.Event
) -> tuple[dict[bytes, int], int]:
    """Key -> offset of its latest record in [first dirty, first uncleanable), and where the map
    ends (earlier than the first uncleanable offset when the map is full: the rest waits)."""
    first_dirty, end = job.info.first_dirty, job.info.first_uncleanable
    latest: dict[bytes, int] = {}
    for view in job.views:
        if view.end_offset <= first_dirty or view.base_offset >= end:
            continue
        for header in iter_headers(view.fd, 0, view.size):
            if stop.is_set():
                raise CleanerStopped
            if header.last_offset < first_dirty or header.is_control or job.is_aborted(header):
                continue
            if header.base_offset >= end:
                break
            if latest and len(latest) + header.records_count > max_entries:
                return latest, max(header.base_offset, first_dirty)
            data = os.pread(view.fd, header.size, header.position)
            base = header.base_offset
            for rec in parse_records(data, read_header(data), max_inflated_size(job.config.max_message_bytes)):
                if rec.key is not None:
                    latest[rec.key] = base + rec.offset_delta
    return latest, end


def group_segments(views: Sequence[SegmentView], max_size: int) -> list[list[SegmentView]]:
    """Kafka's groupSegmentsBySize: consecutive segments merged while the result stays within
    segment.bytes and its offsets within a 32-bit relative offset of the first base offset."""
    groups: list[list[SegmentView]] = []
    i = 0
    while i < len(views):
        group = [views[i]]
        size = views[i].size
        i += 1
        while (
            i < len(views)
            and size + views[i].size <= max_size
            and views[i].end_offset - 1 - group[0].base_offset <= _MAX_RELATIVE_OFFSET
        ):
            size += views[i].size
            group.append(views[i])
            i += 1
        groups.append(group)
    return groups


def _keep_none(rec: RawRecord, offset: int) -> bool:
    return False


def clean_group(
    job: CleaningJob,
    group: list[SegmentView],
    latest: dict[bytes, int],
    cconfig: CleanerConfig,
    stats: CleanerStats,
    stop: threading.Event,
    throttle: _Throttle,
    txns: CleanedTransactionMetadata | None = None,
) -> LogSegment:
    """Write the cleaned copy of ``group`` as ``<base>.log.cleaned`` (+ indexes), fsynced. The result
    is a LogSegment whose paths are the final names; its file descriptor is on the .cleaned file.
    ``txns`` carries the transactions of the pass from one group to the next."""
    if txns is None:
        txns = CleanedTransactionMetadata(job.aborted)
    plog = job.log
    config = job.config
    base = group[0].base_offset
    directory = plog.directory
    cleaned_path = directory / (file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
    fd = os.open(cleaned_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    seg = LogSegment(directory, base, fd, 0, config.index_interval_bytes, job.now_ms)
    try:
        pending = bytearray()
        position = 0
        kept_aborted: list[AbortedTxn] = []

        def keep(rec: RawRecord, offset: int) -> bool:
            return rec.key is not None and offset >= latest.get(rec.key, -1)

        for view in group:
            for header in iter_headers(view.fd, 0, view.size):
                if stop.is_set():
                    raise CleanerStopped
                data = os.pread(view.fd, header.size, header.position)
                h = read_header(data)
                if h.is_control:
                    removable, aborted_txn = txns.on_marker(data, h)
                    result = filter_marker(data, h, removable, job.now_ms, config.delete_retention_ms)
                    if aborted_txn is not None:
                        kept_aborted.append(aborted_txn)
                else:
                    keep_empty = (
                        h.producer_id >= 0 and job.producer_last_offsets.get(h.producer_id) == h.last_offset
                    )
                    result = filter_batch(
                        data,
                        h,
                        _keep_none if txns.on_batch(h) else keep,
                        now_ms=job.now_ms,
                        delete_retention_ms=config.delete_retention_ms,
                        keep_empty=keep_empty,
                        max_size=max_inflated_size(config.max_message_bytes),
                    )
                stats.records_removed += result.removed
                throttle.add(len(data), stop)
                if result.horizon_ms is not None:
                    stats.tombstone_expiry = min(
                        stats.tombstone_expiry or result.horizon_ms, result.horizon_ms
                    )
                if result.data is None:
                    continue
                out = read_header(result.data)
                seg.index_batch(position, out.last_offset, out.max_timestamp)
                seg.next_offset = out.next_offset
                pending += result.data
                position += len(result.data)
                if len(pending) >= cconfig.io_buffer_size:
                    seg.write(pending)
                    pending = bytearray()
            stats.segments_in += 1
            stats.bytes_in += view.size
        if pending:
            seg.write(pending)
        if seg.max_timestamp >= 0:
            seg.time_index.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp)
        for index in (seg.offset_index, seg.time_index):
            _write_fsynced(index.path.with_name(index.path.name + CLEANED_SUFFIX), index.to_bytes())
        if kept_aborted:
            seg.txn_index.replace_entries(kept_aborted)
            _write_fsynced(seg.txn_index.path.with_name(seg.txn_index.path.name + CLEANED_SUFFIX),
                           seg.txn_index.to_bytes())
        os.fsync(fd)
        seg.indexes_dirty = False
        stats.segments_out += 1
        stats.bytes_out += seg.size
        return seg
    except BaseException:
        seg.close()
        discard_cleaned(seg)
        raise


def _write_fsynced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def discard_cleaned(seg: LogSegment) -> None:
    """Remove the .cleaned files of a cleaning that was not swapped in."""
    seg.close()
    for path in (seg.log_path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path):
        path.with_name(path.name + CLEANED_SUFFIX).unlink(missing_ok=True)


# ---- the cleaner thread ----------------------------------------------------------------------------


def _direct(fn: Callable[[], T]) -> T:
    return fn()


class LogCleaner:
    """The cleaner thread of a LogManager.

    ``run_on_owner(fn)`` must run ``fn`` on the thread that owns the logs (the event loop) and return
    its result; the default calls it directly, for a LogManager used from one thread (tests).
    ``config`` is read at every round, so changes (dynamic broker configs) apply live.
    """

    def __init__(
        self,
        log_manager: LogManager,
        config: Callable[[], CleanerConfig],
        *,
        run_on_owner: Callable[[Callable[[], Any]], Any] = _direct,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self._config = config
        self._run_on_owner = run_on_owner
        self._now_ms = now_ms or clock.now_ms
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._first_dirty: dict[TopicPartition, int] = {}
        self._tombstone_expiry: dict[TopicPartition, int] = {}
        self._checkpoint_lock = threading.Lock()
        self.rounds = 0  # completed cleanings, for tests and metrics
        self.last_stats: dict[TopicPartition, CleanerStats] = {}

    # ---- lifecycle -----------------------------------------------------------------------------

    def load_checkpoints(self) -> None:
        for directory in self.log_manager.log_dirs:
            self._first_dirty.update(OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT).read())

    def start(self) -> None:
        self.load_checkpoints()
        self._thread = threading.Thread(target=self._run, name="strom-log-cleaner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop; ``join`` waits for it (call it off the owner thread, which the
        cleaner may be waiting on)."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def wakeup(self) -> None:
        self._wake.set()

    def first_dirty_offset(self, tp: TopicPartition) -> int | None:
        return self._first_dirty.get(tp)

    def _run(self) -> None:
        log.info("log cleaner started")
        while not self._stop.is_set():
            try:
                did = self.clean_once()
            except CleanerStopped:
                break
            except Exception:
                log.exception("log cleaner round failed; backing off")
                did = False
            self.log_manager.delete_due_files()
            if not did:
                self._wake.wait(self._config().backoff_ms / 1000)
                self._wake.clear()
        log.info("log cleaner stopped")

    # ---- a round ---------------------------------------------------------------------------------

    def _owner(self, fn: Callable[[], T]) -> T:
        if self._stop.is_set():
            raise CleanerStopped
        result: T = self._run_on_owner(fn)
        return result

    def grab_filthiest(self) -> CleaningJob | None:
        """On the owner thread: the most cleanable compacted log, with its segments pinned."""
        now = self._now_ms()
        best: CleanableInfo | None = None
        for plog in self.log_manager.all_logs():
            if not plog.config.compact_enabled or plog.closed:
                continue
            tp = (plog.topic, plog.partition)
            info = cleanable_info(plog, self._first_dirty.get(tp), now, self._tombstone_expiry.get(tp))
            if not info.cleanable(plog.config.min_cleanable_dirty_ratio):
                continue
            if best is None or (info.need_now, info.ratio) > (
                best.need_now,
                best.ratio,
            ):  # Kafka: filthiest first
                best = info
        if best is None:
            return None
        plog = best.log
        pinned, truncations = plog.pin_closed_segments(best.first_uncleanable)
        bounds = [s.base_offset for s, _ in pinned[1:]]
        ends = [*bounds, best.first_uncleanable]
        views = [
            SegmentView(s, fd, s.size, s.base_offset, end) for (s, fd), end in zip(pinned, ends, strict=True)
        ]
        last_offsets = {pid: e.last_offset for pid, e in plog.producer_state.producers.items()}
        aborted = plog.aborted_transactions(plog.log_start_offset, best.first_uncleanable)
        return CleaningJob(best, views, truncations, last_offsets, plog.config, now, aborted)

    def clean_once(self) -> bool:
        """One cleaning round; False when no log needed cleaning."""
        cconfig = self._config()
        if not cconfig.enabled:
            return False
        job = self._owner(self.grab_filthiest)
        if job is None:
            return False
        try:
            stats = self.clean(job, cconfig)
        finally:
            job.close()
        self.rounds += 1
        return not stats.aborted

    def clean(self, job: CleaningJob, cconfig: CleanerConfig) -> CleanerStats:
        started = time.monotonic()
        plog = job.log
        tp = (plog.topic, plog.partition)
        stats = CleanerStats()
        latest, end_offset = build_offset_map(job, cconfig.max_map_entries, self._stop)
        stats.keys = len(latest)
        views = [v for v in job.views if v.base_offset < end_offset]
        hook = crash_hook(cconfig.crash_point)
        throttle = _Throttle(cconfig.io_max_bytes_per_second)
        txns = CleanedTransactionMetadata(job.aborted)  # one pass over the log, group after group
        for group in group_segments(views, job.config.segment_bytes):
            try:
                cleaned = clean_group(job, group, latest, cconfig, stats, self._stop, throttle, txns)
            except OSError:
                if not plog.closed:
                    raise
                stats.aborted = True  # the topic was deleted under us: nothing to clean any more
                break
            if hook is not None:
                hook("cleaned")
            old = [v.segment for v in group]
            try:
                replaced = self._owner(
                    lambda cleaned=cleaned, old=old: plog.replace_segments(  # type: ignore[misc]
                        old, cleaned, truncations=job.truncations, on_step=hook
                    )
                )
            except BaseException:
                discard_cleaned(cleaned)
                raise
            if replaced is None:
                discard_cleaned(cleaned)
                stats.aborted = True
                log.info("%s: log changed during cleaning; will clean it again", plog)
                break
            fsync_dir(plog.directory)
            plog.dispose_segments(replaced)
        if not stats.aborted:
            self._first_dirty[tp] = end_offset
            if stats.tombstone_expiry is not None:
                self._tombstone_expiry[tp] = stats.tombstone_expiry
            else:
                self._tombstone_expiry.pop(tp, None)
            self.write_checkpoints()
        stats.elapsed_ms = (time.monotonic() - started) * 1000
        self.last_stats[tp] = stats
        log.info(
            "cleaned %s-%d up to offset %d: %d segments (%d bytes) -> %d (%d bytes), %d records removed, "
            "%d keys, %.0f ms%s",
            plog.topic,
            plog.partition,
            end_offset,
            stats.segments_in,
            stats.bytes_in,
            stats.segments_out,
            stats.bytes_out,
            stats.records_removed,
            stats.keys,
            stats.elapsed_ms,
            " (aborted)" if stats.aborted else "",
        )
        return stats

    def write_checkpoints(self) -> None:
        """``cleaner-offset-checkpoint`` of every log directory: first dirty offset per partition."""
        with self._checkpoint_lock:
            by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_manager.log_dirs}
            for plog in self.log_manager.all_logs():
                tp = (plog.topic, plog.partition)
                if tp in self._first_dirty:
                    by_dir.setdefault(plog.directory.parent, {})[tp] = self._first_dirty[tp]
            for directory, offsets in by_dir.items():
                OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT).write(offsets)
