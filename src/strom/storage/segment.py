"""LogSegment: one ``.log`` file of record batches plus its sparse offset and time indexes."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c

from strom.records.batch import ATTRIBUTES, HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from strom.storage.atomic import write_all
from strom.storage.errors import CorruptIndex
from strom.storage.index import IndexWrite, OffsetIndex, TimeIndex
from strom.storage.open_files import SEGMENT_FILES
from strom.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# The batch header layout of records.batch, unpacked here with a *file* position attached.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_MAX_RELATIVE_OFFSET = 2**31 - 1
SCAN_CHUNK = 1 << 20


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def iter_headers(
    fd: int, start: int, end: int, *, verify: bool = False, chunk: int = SCAN_CHUNK
) -> Iterator[BatchHeader]:
    """Headers of the whole v2 batches in bytes [start, end) of a file, with file positions.

    Stops at the first bytes that are not a whole batch (bad magic, impossible length, past
    ``end``, or with ``verify`` a CRC-32C mismatch): the caller compares the end of the last
    header it got with ``end`` to learn where the valid data stops. Reads ``chunk`` bytes at a time.
    """
    buf = b""
    buf_start = start
    pos = start
    while end - pos >= HEADER_SIZE:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(max(chunk, HEADER_SIZE), end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        header = BatchHeader(pos, *_HEADER.unpack_from(buf, off))
        size = header.batch_length + LOG_OVERHEAD
        if (
            header.magic != 2
            or header.batch_length < _MIN_BATCH_LENGTH
            or pos + size > end
            or header.last_offset_delta < 0
            or header.records_count < 0
        ):
            return
        if verify:
            if off + size <= len(buf):
                crc = crc32c.crc32c(memoryview(buf)[off + ATTRIBUTES : off + size])
            else:
                data = os.pread(fd, size - ATTRIBUTES, pos + ATTRIBUTES)
                if len(data) != size - ATTRIBUTES:
                    return
                crc = crc32c.crc32c(data)
            if crc != header.crc:
                return
        yield header
        pos += size


class LogSegment:
    """A segment file and its indexes. ``size`` is the number of valid bytes in the file."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        size: int,
        index_interval_bytes: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.fd = fd
        if fd >= 0:
            SEGMENT_FILES.opened()
        self.size = size
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX)
        self.offset_index = OffsetIndex(directory / file_name(base_offset, INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / file_name(base_offset, TIME_INDEX_SUFFIX), base_offset)
        self.txn_index = TransactionIndex(directory / file_name(base_offset, TXN_INDEX_SUFFIX))
        # Offset after the last batch (the segment's part of the log end offset).
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.last_index_position = 0
        self.indexes_dirty = True
        self._rolling_timestamp: int | None = None
        self.file_made = True  # False until ``make_file``, for a segment ``create(lazy=True)`` made

    def make_file(self) -> None:
        """Make the ``.log`` file of a segment ``create(lazy=True)`` made (before its first write;
        the caller makes the directory entry durable with its next flush)."""
        SEGMENT_FILES.check_room()
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        SEGMENT_FILES.opened()
        self.file_made = True

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int,
               *, lazy: bool = False) -> LogSegment:
        """An empty segment. ``lazy``: no file of it exists (the directory holds no segment), and
        its ``.log`` file is made by ``make_file`` before the first write: a partition that never
        gets a record has no segment file and holds no file descriptor (Kafka makes the file at
        once; at 30,000 partitions that is 30,000 open files, more than many systems allow one
        process, and making files is most of what creating a partition costs)."""
        if lazy:
            seg = cls(directory, base_offset, -1, 0, index_interval_bytes, now_ms)
            seg.file_made = False
            seg.txn_index.known_absent()
            return seg
        path = directory / file_name(base_offset, LOG_SUFFIX)
        SEGMENT_FILES.check_room()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size:
            os.close(fd)
            raise FileExistsError(f"segment {path} already exists with data")
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):  # stale indexes of a segment cut away
            (directory / file_name(base_offset, suffix)).unlink(missing_ok=True)
        return cls(directory, base_offset, fd, 0, index_interval_bytes, now_ms)

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """Open an existing segment; call ``load_indexes`` or ``recover`` before using it."""
        fd = os.open(directory / file_name(base_offset, LOG_SUFFIX), os.O_RDWR)
        return cls(directory, base_offset, fd, os.fstat(fd).st_size, index_interval_bytes, now_ms)

    def close(self) -> None:
        """Close the file handle only; indexes are written by ``write_indexes``."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            SEGMENT_FILES.closed()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            path.unlink(missing_ok=True)

    def seal(self) -> list[Path]:
        """The segment stops being active: record its max timestamp and write its indexes.
        Returns the index files replaced (``write_indexes``)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        return self.write_indexes()

    def index_files_current(self) -> bool:
        """The index files hold what a seal would write now (a recovery rebuilt the same entries):
        they need not be written again. Reading two small files is cheaper than making new ones."""
        try:
            return (self.offset_index.path.read_bytes() == self.offset_index.to_bytes()
                    and self.time_index.path.read_bytes()
                    == self.time_index.sealed_bytes(self.max_timestamp, self.offset_of_max_timestamp))
        except FileNotFoundError:
            return False

    def write_indexes(self) -> list[Path]:
        """Write the index files that changed; returns those replaced, which need an fsync and
        a directory fsync to be durable (files only extended or made need neither: IndexWrite).
        A segment with no offset index entry (less than index.interval.bytes of batches after its
        first) gets no index files: its time index could only hold the max timestamp, which a
        start learns from the batch headers it reads anyway (``load_indexes``). Making two files
        per partition was most of a clean stop's time with thousands of small partitions."""
        replaced = []
        if self.indexes_dirty:
            if self.file_made and (  # a segment without its file (no record yet) has no index files
                    len(self.offset_index) or self.offset_index.path.exists() or self.time_index.path.exists()):
                replaced = [index.path for index in (self.offset_index, self.time_index)
                            if index.write() is IndexWrite.REPLACED]
            self.indexes_dirty = False
        return replaced

    # ---- append ----------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append bytes with one write; on failure (disk full) cut the file back. Returns the position."""
        position = self.size
        try:
            write_all(self.fd, memoryview(data), position)
        except OSError:
            os.ftruncate(self.fd, position)
            raise
        self.size = position + len(data)
        return position

    def index_batch(self, position: int, last_offset: int, max_timestamp: int) -> None:
        """Index bookkeeping for one batch, identical on append and on recovery (as Kafka does)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if position - self.last_index_position > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.last_index_position = position
        self.indexes_dirty = True

    def rolling_timestamp(self) -> int | None:
        """Max timestamp of the first batch, which segment.ms counts from (Kafka's rule)."""
        if self._rolling_timestamp is None and self.size >= HEADER_SIZE:
            self._rolling_timestamp = BatchHeader(
                0, *_HEADER.unpack(os.pread(self.fd, HEADER_SIZE, 0))
            ).max_timestamp
        return self._rolling_timestamp

    def fits_relative(self, offset: int) -> bool:
        return offset - self.base_offset <= _MAX_RELATIVE_OFFSET

    # ---- loading and recovery --------------------------------------------------------------

    def load_indexes(self, *, verify_tail: bool = False) -> bool:
        """Trust the index files only if they agree with the log where that is cheap to see:
        the batches after the last offset index entry (about index.interval.bytes of headers)
        must end exactly at the end of the file, none of them may lie where the index rule would
        have made an entry, and none may be newer than the time index's last (final) entry.
        Missing files are empty indexes: right only for a segment whose headers are all read
        here (no offset entry), whose max timestamp is then taken from those headers.
        ``verify_tail``: those batches' CRCs are checked too (the active segment's, at every
        start: bytes can be appended or damaged while the broker is down).
        False means: rebuild with ``recover``."""
        offset_index, time_index = self.offset_index, self.time_index
        if not ((offset_index.load(self.size) or offset_index.missing) and (time_index.load() or time_index.missing)):
            return False
        start = offset_index.last_position
        if start and time_index.missing:
            return False
        indexed_last = self.base_offset + offset_index.relative_offsets[-1] if start else -1
        indexed_max = time_index.last_entry()
        tail_max = (-1, self.base_offset)
        end, next_offset = start, self.base_offset
        chunk = 2 * self.index_interval_bytes + HEADER_SIZE
        for header in iter_headers(self.fd, start, self.size, chunk=chunk, verify=verify_tail):
            if header.position == start and start and header.last_offset != indexed_last:
                return False  # the entry does not point at the batch it names
            if header.position - start > self.index_interval_bytes:
                return False  # an offset index entry is missing
            if header.max_timestamp > tail_max[0]:
                tail_max = (header.max_timestamp, header.last_offset)
            end, next_offset = header.position + header.size, header.next_offset
        if end != self.size:
            return False
        if start:
            # The batches before the last entry were not read: the time index must hold their
            # max, and a newer one after it means its final entry is missing.
            if tail_max[0] > indexed_max[0]:
                return False
            self.max_timestamp, self.offset_of_max_timestamp = indexed_max
        else:
            # Every batch was read: the max is theirs (a close need not have written it).
            if indexed_max[0] > tail_max[0]:
                return False  # an entry newer than every batch is not this log's
            self.max_timestamp, self.offset_of_max_timestamp = tail_max
        self.next_offset = next_offset
        self.last_index_position = start
        self.indexes_dirty = False
        return True

    def recover(
        self,
        *,
        from_index_tail: bool = False,
        verify: bool = True,
        truncate: bool = True,
        on_batch: Callable[[BatchHeader], None] | None = None,
    ) -> int:
        """Re-read batches, rebuilding index entries, and cut the file at the first bad byte.

        From position 0 (indexes rebuilt) or, with ``from_index_tail``, from the last offset index
        entry (indexes kept; falls back to a full pass if the tail is damaged). Offsets must
        increase monotonically. Returns the number of bytes cut off.
        """
        start = self.offset_index.last_position if from_index_tail else 0
        if start:
            indexed_last = self.base_offset + self.offset_index.relative_offsets[-1]
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
            expected_next = -1  # unknown until the indexed batch has been read
        else:
            indexed_last = -1
            self.offset_index.clear()
            self.time_index.clear()
            self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
            expected_next = self.base_offset
        self.last_index_position = start
        valid_end = start
        next_offset = self.base_offset
        for header in iter_headers(self.fd, start, self.size, verify=verify):
            last = header.base_offset + header.last_offset_delta
            if indexed_last >= 0:
                if last != indexed_last:
                    break
                indexed_last = -1
                expected_next = header.base_offset
            if header.base_offset < expected_next or not self.fits_relative(last):
                break
            self.index_batch(header.position, last, header.max_timestamp)
            if on_batch is not None:
                on_batch(header)
            expected_next = next_offset = last + 1
            valid_end = header.position + header.size
        if start and valid_end < self.size:
            # A damaged tail after the indexed batch (or the indexed batch itself): redo it all.
            return self.recover(verify=verify, truncate=truncate, on_batch=on_batch)
        self.next_offset = next_offset
        cut = self.size - valid_end
        if cut and truncate:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self._rolling_timestamp = None
        self.indexes_dirty = True
        return cut

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; returns bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        os.ftruncate(self.fd, header.position)
        self.size = header.position
        self.offset_index.truncate_to_position(header.position)
        self.time_index.truncate_to_offset(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        for index in (self.offset_index, self.time_index):  # never leave a stale index on disk
            index.path.unlink(missing_ok=True)
            index.forget_file()
        self.recover(from_index_tail=True, verify=False)
        return removed

    def rebuild_index(self) -> None:
        """Re-index the whole file by its headers, changing no data (for an index found wrong at runtime)."""
        self.recover(verify=False, truncate=False)

    # ---- reading ---------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """The first batch at or after ``start_position`` whose last offset is >= ``offset``."""
        indexed = self.offset_index.lookup(offset)
        pos = max(start_position, indexed)
        found_any = False
        for header in iter_headers(
            self.fd, pos, self.size, chunk=2 * self.index_interval_bytes + HEADER_SIZE
        ):
            if header.base_offset < self.base_offset:
                raise CorruptIndex(f"{self.log_path}: batch at {header.position} is not in this segment")
            found_any = True
            if header.base_offset + header.last_offset_delta >= offset:
                return header
        if not found_any and pos < self.size and pos == indexed:
            raise CorruptIndex(f"{self.log_path}: no batch at indexed position {pos}")
        return None

    def read(self, position: int, size: int) -> bytes:
        if not self.file_made:
            return b""
        return os.pread(self.fd, size, position)

    def last_boundary(self, start: int, end: int) -> int:
        """The last batch boundary in [start, end], ``start`` being one: jumps to the nearest
        indexed position first, so only about index.interval.bytes of headers are walked."""
        pos = max(start, self.offset_index.last_position_at_or_before(end))
        for header in iter_headers(self.fd, pos, end, chunk=2 * self.index_interval_bytes + HEADER_SIZE):
            pos = header.position + header.size
        return pos

    def largest_timestamp(self) -> int:
        """For time retention: the max timestamp, or the file's mtime when no batch carries one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        if not self.file_made:
            return self.created_ms
        return int(os.stat(self.log_path).st_mtime * 1000)
