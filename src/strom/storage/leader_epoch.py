"""LeaderEpochFileCache: which leader epoch started at which offset (``leader-epoch-checkpoint``).

Replicas use it to find where their log diverges from the leader's (OffsetsForLeaderEpoch). The
file is rewritten atomically when an epoch is added or entries are cut; the fsync waits for the
partition's next flush, and a lost or torn file is rebuilt from the batches seen in recovery.

An epoch a new leader starts at its log end (``assign(..., defer=True)``) covers no record yet, so
its file is written just before the first record is appended after it (``write_deferred``), on the
event loop like every other write of the file. Until then it costs nothing to lose: no record
depends on it, and the leader assigns it again when it starts. So a CreateTopics of thousands of
partitions makes no file per partition for it (Kafka writes the file at once; making a file is
most of what a new partition costs on these disks), and an idle partition never does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from strom.storage.atomic import fsync_path, read_file, write_atomic
from strom.storage.checkpoint import format_entries, parse_entries

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    def __init__(self, directory: Path, *, read: bool = True) -> None:
        """``read=False``: the directory was just made, there is no file to read."""
        self.path = directory / FILE_NAME
        self.entries: list[EpochEntry] = self._read() if read else []
        self._needs_fsync = False
        self._held: list[EpochEntry] | None = None  # entries as on disk while writes are held back
        self._deferred = False  # entries added with ``defer`` are not in the file yet

    def _read(self) -> list[EpochEntry]:
        data = read_file(self.path)
        if data is None:
            return []
        try:
            text = data.decode()
            entries = [EpochEntry(int(e), int(o)) for e, o in parse_entries(text, 2)]
        except ValueError as exc:  # UnicodeDecodeError included
            log.warning("ignoring malformed %s: %s", self.path, exc)
            return []
        if any(b.epoch <= a.epoch or b.start_offset < a.start_offset for a, b in pairwise(entries)):
            log.warning("ignoring %s: epochs or offsets not increasing", self.path)
            return []
        return entries

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Changes inside are written once at the end, and only if the entries differ from the file:
        recovery cuts and re-learns epochs that are usually the same (a write per log would be most of
        a large broker's start)."""
        self._held = list(self.entries)
        try:
            yield
        finally:
            held, self._held = self._held, None
            if self.entries != held:
                self._write()

    def _write(self) -> None:
        if self._held is not None:
            return
        write_atomic(
            self.path, format_entries([f"{e.epoch} {e.start_offset}" for e in self.entries]), fsync=False
        )
        self._needs_fsync = True
        self._deferred = False

    @property
    def needs_fsync(self) -> bool:
        return self._needs_fsync

    @property
    def deferred(self) -> bool:
        """Entries added with ``defer`` are not written yet."""
        return self._deferred

    def write_deferred(self) -> None:
        """Write the entries ``assign(..., defer=True)`` held back: records are about to follow."""
        if self._deferred:
            self._write()

    def flush(self) -> None:
        if self._needs_fsync:
            self._needs_fsync = False
            fsync_path(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, defer: bool = False) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (only newer epochs are added).
        ``defer``: the epoch starts at the log end (no record in it yet); write the file only
        before the next append (``write_deferred``)."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        # An older entry starting at or after this offset was for data since truncated away.
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        if defer and self._held is None:
            self._deferred = True
        else:
            self._write()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (largest epoch <= requested, start offset of the next epoch, or
        the log end offset for the latest epoch); (-1, -1) when the epoch is unknown or newer."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        for i, entry in enumerate(self.entries):
            if entry.epoch > requested_epoch:
                floor_epoch = self.entries[i - 1].epoch if i else requested_epoch
                return floor_epoch, entry.start_offset
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # newer than any epoch we know

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (the log was truncated there)."""
        keep = [e for e in self.entries if e.start_offset < end_offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        older = [e for e in self.entries if e.start_offset < start_offset]
        if not older:
            return
        newer = self.entries[len(older) :]
        if newer and newer[0].start_offset == start_offset:
            self.entries = newer
        else:
            self.entries = [EpochEntry(older[-1].epoch, start_offset), *newer]
        self._write()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._write()
