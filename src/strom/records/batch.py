"""Record batch v2 (magic 2) header view.

The broker never decodes individual records on the hot path: it reads the 61-byte header,
checks lengths and the CRC-32C, and rewrites baseOffset / partitionLeaderEpoch in place (the CRC
does not cover them). Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

# Byte offsets inside a batch (big-endian), from Kafka's DefaultRecordBatch.
BASE_OFFSET = 0
BATCH_LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57
HEADER_SIZE = 61
# baseOffset + batchLength: the part of the header not counted in batchLength.
LOG_OVERHEAD = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


class InvalidRecordBatch(ValueError):
    """A batch that fails validation; ``error`` names the Kafka error to answer with."""

    def __init__(self, message: str, error: str = "corrupt_message") -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded 61-byte header of one record batch, plus where it sits in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at ``position``; raises InvalidRecordBatch if fewer than 61 bytes remain."""
    if len(buf) - position < HEADER_SIZE:
        raise InvalidRecordBatch("record batch shorter than its header")
    fields = _HEADER.unpack_from(buf, position)
    return BatchHeader(position, *fields)


def compute_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    start = header.position + ATTRIBUTES
    end = header.position + header.size
    return crc32c.crc32c(memoryview(buf)[start:end])


def iter_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> list[BatchHeader]:
    """Split and validate a buffer that must hold whole v2 batches, back to back.

    Raises InvalidRecordBatch naming the Kafka error for the first problem found.
    """
    headers: list[BatchHeader] = []
    position = 0
    total = len(buf)
    while position < total:
        if total - position < LOG_OVERHEAD + 5:
            raise InvalidRecordBatch("truncated record batch")
        magic = buf[position + MAGIC]
        if magic != 2:
            raise InvalidRecordBatch(
                f"record batch magic {magic} is not supported (only v2)",
                "unsupported_for_message_format" if magic in (0, 1) else "corrupt_message",
            )
        header = read_header(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > total:
            raise InvalidRecordBatch("record batch length does not match the data")
        if header.last_offset_delta < 0 or header.records_count < 0:
            raise InvalidRecordBatch("record batch has negative counts")
        if verify_crc and compute_crc(buf, header) != header.crc:
            raise InvalidRecordBatch("record batch CRC-32C mismatch")
        headers.append(header)
        position += header.size
    return headers


def assign_offsets(buf: bytearray | memoryview, header: BatchHeader, base_offset: int, leader_epoch: int) -> None:
    """Write the broker-assigned base offset and leader epoch into a batch (not covered by the CRC)."""
    _I64.pack_into(buf, header.position + BASE_OFFSET, base_offset)
    _I32.pack_into(buf, header.position + PARTITION_LEADER_EPOCH, leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int) -> None:
    """Stamp LogAppendTime into a batch: sets the timestamp type bit and maxTimestamp, then re-CRCs."""
    pos = header.position
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, pos + ATTRIBUTES, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP, timestamp_ms)
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES : pos + header.size])
    struct.pack_into(">I", buf, pos + CRC, crc)


def whole_batches_end(buf: bytes | bytearray | memoryview) -> int:
    """Where the last whole batch at the start of ``buf`` ends (a read may stop inside a batch)."""
    end = 0
    while end + LOG_OVERHEAD <= len(buf):
        length = int.from_bytes(buf[end + BATCH_LENGTH : end + LOG_OVERHEAD], "big", signed=True)
        if length <= 0 or end + LOG_OVERHEAD + length > len(buf):
            break
        end += LOG_OVERHEAD + length
    return end
