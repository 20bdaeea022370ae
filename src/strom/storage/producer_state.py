"""Idempotent producer state of one partition (Kafka's ProducerStateManager).

For each producer id: its epoch and the metadata of its last five batches, enough to answer a
retried batch with the offsets it got the first time, and the first offset of its ongoing
transaction (transactional batches since its last COMMIT/ABORT marker), from which the partition's
last stable offset follows. Persisted as ``<20-digit offset>.snapshot``
files (state after every batch below that offset); on open the newest valid snapshot is loaded and
the log after it is replayed by batch headers only.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c

from strom.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from strom.records.control import Marker
from strom.storage.atomic import read_file, write_atomic

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_INT32_MAX = 2**31 - 1

# Snapshot file: magic, version, crc32c of everything after it, producer count, then per producer
# (id, epoch, last timestamp, [v2: ongoing transaction's first offset,] batch count) and per batch
# (first seq, last seq, first offset, last offset).
_SNAPSHOT_MAGIC = b"STPS"
_SNAPSHOT_VERSION = 2
_FILE_HEADER = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_PRODUCER_V1 = struct.Struct(">qhqb")
_PRODUCER = struct.Struct(">qhqqb")
_BATCH = struct.Struct(">iiqq")


class SequenceStatus(enum.Enum):
    OK = "none"
    DUPLICATE = "duplicate_sequence_number"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence_number"
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"


class SequenceCheck(NamedTuple):
    """Outcome of ``check``; for DUPLICATE the offsets the batch got when first appended."""

    status: SequenceStatus
    first_offset: int = -1
    last_offset: int = -1

    @property
    def error(self) -> str:
        """Kafka's error name for the produce response (a duplicate is answered as a success)."""
        return "none" if self.status is SequenceStatus.DUPLICATE else self.status.value


SEQUENCE_OK = SequenceCheck(SequenceStatus.OK)


class CompletedTxn(NamedTuple):
    """A transaction a marker just ended on this partition."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    last_timestamp: int = -1
    current_txn_first_offset: int = -1  # -1: no transaction open on this partition
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last_seq = header.last_sequence
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path, names: Iterable[str] | None = None) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, oldest first; ``names``: the directory's listing
    when the caller has it already."""
    found = []
    for name in os.listdir(directory) if names is None else names:
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), directory / name))
    return sorted(found)


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # Producer id -> first offset of its open transaction (the producers whose entry has one).
        self.ongoing_txns: dict[int, int] = {}
        # State reflects every batch below this offset.
        self.map_end_offset = 0

    # ---- the produce path ------------------------------------------------------------------

    def check(self, header: BatchHeader) -> SequenceCheck:
        """Validate a batch's producer epoch and sequence before it is appended."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return SEQUENCE_OK
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer (new, or its state was removed with old segments): any sequence.
            return SEQUENCE_OK
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return SequenceCheck(SequenceStatus.DUPLICATE, duplicate.first_offset, duplicate.last_offset)
        if header.producer_epoch < entry.producer_epoch:
            return SequenceCheck(SequenceStatus.INVALID_PRODUCER_EPOCH)
        if header.producer_epoch > entry.producer_epoch:
            ok = header.base_sequence == 0
        else:
            ok = in_sequence(entry.last_seq, header.base_sequence)
        return SEQUENCE_OK if ok else SequenceCheck(SequenceStatus.OUT_OF_ORDER_SEQUENCE)

    def update(self, header: BatchHeader, marker: Marker | None = None) -> CompletedTxn | None:
        """Record an appended batch (its header must carry the assigned base offset). For a control
        batch ``marker`` is what it holds; returns the transaction a marker ended, if any."""
        completed = None
        if header.producer_id != NO_PRODUCER_ID:
            pid = header.producer_id
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid, header.producer_epoch)
            elif header.producer_epoch != entry.producer_epoch:
                entry.producer_epoch = header.producer_epoch
                entry.batches.clear()
            if header.is_control:
                if marker is not None and entry.current_txn_first_offset >= 0:
                    completed = CompletedTxn(pid, entry.current_txn_first_offset, header.base_offset,
                                             not marker.is_commit)
                entry.current_txn_first_offset = -1
                self.ongoing_txns.pop(pid, None)
            else:
                if header.base_sequence != NO_SEQUENCE:
                    entry.batches.append(
                        BatchMetadata(
                            header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
                        )
                    )
                if header.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = header.base_offset
                    self.ongoing_txns[pid] = header.base_offset
            entry.last_timestamp = header.max_timestamp
        self.map_end_offset = header.next_offset
        return completed

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none open)."""
        return min(self.ongoing_txns.values()) if self.ongoing_txns else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` has ended (Kafka stores it with an aborted transaction)."""
        first = self.first_unstable_offset()
        return first if first is not None else completed.last_offset + 1

    # ---- log start moves, truncation -------------------------------------------------------

    def truncate_head(self, log_start_offset: int, names: Iterable[str] | None = None) -> None:
        """Forget producers whose every batch is below the new log start (Kafka does the same).
        ``names``: the directory's listing, if known."""
        stale = [pid for pid, e in self.producers.items()
                 if e.batches and e.last_offset < log_start_offset and e.current_txn_first_offset < 0]
        for pid in stale:
            del self.producers[pid]
        for offset, path in list_snapshots(self.directory, names)[:-1]:
            if offset < log_start_offset:
                path.unlink(missing_ok=True)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)

    def remove_expired_producers(self, now: int, expiration_ms: int) -> list[int]:
        """Kafka's removeExpiredProducers: forget producers whose last batch is older than
        producer.id.expiration.ms, except those with a transaction open here (its first offset
        holds the LSO and its marker must still find it). Returns the ids forgotten. A later batch
        from one of them is taken as from a new producer (any sequence), as after Kafka expires it."""
        cutoff = now - expiration_ms
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and e.last_timestamp <= cutoff]
        for pid in expired:
            del self.producers[pid]
        return expired

    def delete_snapshots_after(self, offset: int) -> None:
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset > offset:
                path.unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def clear(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = offset

    # ---- snapshots -------------------------------------------------------------------------

    def take_snapshot(self) -> Path:
        """Write the state at ``map_end_offset`` (atomically, not fsynced); returns the file for
        the caller to make durable."""
        path = snapshot_path(self.directory, self.map_end_offset)
        body = bytearray(_COUNT.pack(len(self.producers)))
        for entry in self.producers.values():
            body += _PRODUCER.pack(entry.producer_id, entry.producer_epoch, entry.last_timestamp,
                                   entry.current_txn_first_offset, len(entry.batches))
            for b in entry.batches:
                body += _BATCH.pack(*b)
        write_atomic(
            path,
            _FILE_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(body)) + body,
            fsync=False,
        )
        return path

    def load_latest_snapshot(self, log_start_offset: int, log_end_offset: int,
                             names: Iterable[str] | None = None) -> int:
        """Load the newest readable snapshot at or below the log end; returns its offset (the log is
        replayed from there, or from the log start if that is later). Snapshots past the log end
        (data lost or truncated) are deleted. ``names``: the directory's listing, if known."""
        self.clear(log_start_offset)
        for offset, path in reversed(list_snapshots(self.directory, names)):
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                data = read_file(path)
                if data is None:
                    raise FileNotFoundError(path)
                self._read_snapshot(data)
            except (ValueError, struct.error, OSError) as exc:
                log.warning("deleting unreadable producer snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
                self.clear(log_start_offset)
                continue
            self.map_end_offset = offset
            return offset
        return log_start_offset

    def _read_snapshot(self, data: bytes) -> None:
        magic, version, crc = _FILE_HEADER.unpack_from(data, 0)
        body = memoryview(data)[_FILE_HEADER.size :]
        if magic != _SNAPSHOT_MAGIC or version not in (1, _SNAPSHOT_VERSION):
            raise ValueError("not a snapshot of a known version")
        if crc32c.crc32c(body) != crc:
            raise ValueError("CRC-32C mismatch")
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        producers: dict[int, ProducerStateEntry] = {}
        layout = _PRODUCER if version == _SNAPSHOT_VERSION else _PRODUCER_V1
        for _ in range(count):
            if version == _SNAPSHOT_VERSION:
                pid, epoch, last_ts, txn_first, n = layout.unpack_from(body, pos)
            else:
                pid, epoch, last_ts, n = layout.unpack_from(body, pos)
                txn_first = -1
            pos += layout.size
            entry = ProducerStateEntry(pid, epoch, last_ts, txn_first)
            for _b in range(n):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
        if pos != len(body):
            raise ValueError("trailing bytes")
        self.producers = producers
        self.ongoing_txns = {pid: e.current_txn_first_offset for pid, e in producers.items()
                             if e.current_txn_first_offset >= 0}
