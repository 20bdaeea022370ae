"""Sparse offset and time indexes of one segment, kept in memory as arrays.

File formats are Kafka's: ``.index`` holds 8-byte entries (4-byte offset relative to the segment
base, 4-byte file position), ``.timeindex`` 12-byte entries (8-byte timestamp, 4-byte relative
offset), all big-endian. The files are written when a segment is sealed or closed: new entries
appended in place, a file made whole, or replaced atomically when entries were cut; a file that
fails the load's checks is rebuilt from the log.
"""

from __future__ import annotations

import enum
import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

import crc32c

from strom.storage.atomic import read_file, write_all, write_atomic

_TIME_ENTRY = struct.Struct(">qi")
_LITTLE = sys.byteorder == "little"


def _int32_array(data: bytes) -> array[int]:
    a = array("i")
    a.frombytes(data)
    if _LITTLE:
        a.byteswap()
    return a


class IndexWrite(enum.Enum):
    """What ``write`` did to an index file. An EXTENDED file (entries appended in place, or a
    file made new) needs no fsync before a clean shutdown marker: a start checks the active
    segment's indexes against the log (``LogSegment.load_indexes``) and rebuilds one that lacks
    entries. A REPLACED file can have lost entries the old one had, so it is fsynced, and its
    directory, like any atomic write."""

    UNCHANGED = 0
    EXTENDED = 1
    REPLACED = 2


class _IndexFile:
    """What both index kinds share: the file, fixed-size entries, whole-file writes and reads."""

    ENTRY_SIZE: int

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # (length, CRC-32C) of what the file holds, as last read or written here (None: unknown):
        # an index whose entries did not change is not written again (e.g. the offset index of a
        # segment that grew less than index.interval.bytes since the start).
        self._on_disk: tuple[int, int] | None = None

    def clear(self) -> None:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        raise NotImplementedError

    def write(self) -> IndexWrite:
        """Write the file (no fsync) unless it holds these entries already. Entries only added
        since the file was read or written are appended in place, and a missing file is made
        with them; anything else (entries cut) replaces the file atomically."""
        data = self.to_bytes()
        fingerprint = len(data), crc32c.crc32c(data)
        on_disk = self._on_disk
        if fingerprint == on_disk and self.path.exists():
            return IndexWrite.UNCHANGED
        extended = (on_disk is not None and on_disk[0] < len(data)
                    and crc32c.crc32c(memoryview(data)[: on_disk[0]]) == on_disk[1]
                    and self._extend(data, on_disk[0]))
        if extended or self._make(data):
            kind = IndexWrite.EXTENDED
        else:
            write_atomic(self.path, data, fsync=False)
            kind = IndexWrite.REPLACED
        self._on_disk = fingerprint
        return kind

    def _extend(self, data: bytes, length: int) -> bool:
        """Append ``data[length:]`` to a file that holds ``data[:length]``; False if it does not."""
        try:
            fd = os.open(self.path, os.O_WRONLY)
        except FileNotFoundError:
            return False
        try:
            if os.fstat(fd).st_size != length:
                return False
            write_all(fd, memoryview(data)[length:], length)
        finally:
            os.close(fd)
        return True

    def _make(self, data: bytes) -> bool:
        """Create the file with ``data``; False if it exists."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            write_all(fd, memoryview(data), 0)
        except OSError:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return True

    @property
    def missing(self) -> bool:
        """The file was not there when last read (or was forgotten): nothing known on disk."""
        return self._on_disk is None

    def forget_file(self) -> None:
        """The file was removed or replaced behind this object's back: write it next time."""
        self._on_disk = None

    def _read_entries(self) -> bytes | None:
        """Clear, then the file's bytes; None if it is missing or not a whole number of entries."""
        self.clear()
        data = read_file(self.path)
        self._on_disk = None if data is None else (len(data), crc32c.crc32c(data))
        return None if data is None or len(data) % self.ENTRY_SIZE else data


class OffsetIndex(_IndexFile):
    """Maps a relative offset to the file position of a batch at or before it."""

    ENTRY_SIZE = 8

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        # Relative offset of the *last* record of the indexed batch, and that batch's position
        # (Kafka's convention: every offset >= an entry lies in that batch or after it).
        self.relative_offsets: array[int] = array("i")
        self.positions: array[int] = array("i")

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, offset: int, position: int) -> None:
        self.relative_offsets.append(offset - self.base_offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last entry whose offset is <= ``offset``; 0 if there is none."""
        i = bisect_right(self.relative_offsets, offset - self.base_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def last_position_at_or_before(self, position: int) -> int:
        """The greatest indexed batch position <= ``position`` (0 if none): a known batch boundary."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    @property
    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_to_position(self, size: int) -> None:
        """Drop entries for batches at or beyond ``size`` bytes."""
        n = bisect_right(self.positions, size - 1)
        del self.relative_offsets[n:]
        del self.positions[n:]

    def clear(self) -> None:
        del self.relative_offsets[:]
        del self.positions[:]

    def to_bytes(self) -> bytes:
        out = array("i", bytes(self.ENTRY_SIZE * len(self)))
        out[0::2] = self.relative_offsets
        out[1::2] = self.positions
        if _LITTLE:
            out.byteswap()
        return out.tobytes()

    def load(self, segment_size: int) -> bool:
        """Read the file; False (and empty) if it is missing or fails the sanity check."""
        data = self._read_entries()
        if data is None:
            return False
        both = _int32_array(data)
        rel, pos = both[0::2], both[1::2]
        # Strictly increasing offsets and positions, inside the segment: anything else is garbage.
        previous_rel, previous_pos = -1, -1
        for r, p in zip(rel, pos, strict=True):
            if r <= previous_rel or p <= previous_pos or p >= segment_size:
                return False
            previous_rel, previous_pos = r, p
        self.relative_offsets, self.positions = rel, pos
        return True


class TimeIndex(_IndexFile):
    """Maps a timestamp to the offset of the first batch that reached it; entries only when it grows."""

    ENTRY_SIZE = 12

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self.timestamps: array[int] = array("q")
        self.relative_offsets: array[int] = array("i")

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if not self.timestamps or timestamp > self.timestamps[-1]:
            self.timestamps.append(timestamp)
            self.relative_offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``; (-1, base) if none."""
        i = bisect_right(self.timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self.timestamps[i], self.base_offset + self.relative_offsets[i]

    def last_entry(self) -> tuple[int, int]:
        if not self.timestamps:
            return -1, self.base_offset
        return self.timestamps[-1], self.base_offset + self.relative_offsets[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        rel = offset - self.base_offset
        n = len(self.relative_offsets)
        while n and self.relative_offsets[n - 1] >= rel:
            n -= 1
        del self.timestamps[n:]
        del self.relative_offsets[n:]

    def clear(self) -> None:
        del self.timestamps[:]
        del self.relative_offsets[:]

    def sealed_bytes(self, max_timestamp: int, offset_of_max_timestamp: int) -> bytes:
        """The file as a seal with this max timestamp would write it (its final entry added)."""
        data = self.to_bytes()
        if max_timestamp >= 0 and (not self.timestamps or max_timestamp > self.timestamps[-1]):
            data += _TIME_ENTRY.pack(max_timestamp, offset_of_max_timestamp - self.base_offset)
        return data

    def to_bytes(self) -> bytes:
        out = bytearray(self.ENTRY_SIZE * len(self))
        for i, (ts, rel) in enumerate(zip(self.timestamps, self.relative_offsets, strict=True)):
            _TIME_ENTRY.pack_into(out, i * self.ENTRY_SIZE, ts, rel)
        return bytes(out)

    def load(self) -> bool:
        """Read the file; False (and empty) if it is missing or fails the sanity check."""
        data = self._read_entries()
        if data is None:
            return False
        previous_ts, previous_rel = None, -1
        timestamps: array[int] = array("q")
        rels: array[int] = array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if rel < previous_rel or rel < 0 or (previous_ts is not None and ts <= previous_ts):
                return False
            timestamps.append(ts)
            rels.append(rel)
            previous_ts, previous_rel = ts, rel
        self.timestamps, self.relative_offsets = timestamps, rels
        return True
