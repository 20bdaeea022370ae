"""Building and reading the records inside v2 batches.

Not used on the produce/fetch hot path. The coordinator builds batches for __consumer_offsets,
compaction and tools look inside batches, tests check content; produce to a compacted topic reads
key lengths (null_key_indexes). Compression goes through cramjam.

Reading a compressed batch never decompresses it whole: its records are decompressed a chunk at a
time (CHUNK bytes, as Kafka reads them through a stream with a small buffer) and parsed as they come,
and a batch whose records would decompress to more than ``max_size`` bytes is refused as corrupt when
the reader gets there (a few kilobytes of zstd can hold gigabytes). Streaming decompressors:
Python's zlib for gzip, ``lz4.frame`` for lz4, ``compression.zstd`` (the backport before Python
3.14) for zstd, and snappy block by block (each block states its length before it is inflated).
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import cramjam
import crc32c

from strom.records import batch as rb

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Java's snappy framing (xerial SnappyOutputStream): magic header, then length-prefixed blocks.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"

# How far the records of one batch may decompress: INFLATE_FACTOR times the topic's
# max.message.bytes (which bounds the compressed batch), and never less than that of Kafka's default.
# Kafka sets no such bound (it reads every compressed batch at produce, through a stream); strom looks
# inside batches only where it must (see the module docstring), so this is where a bomb stops.
INFLATE_FACTOR = 64
DEFAULT_MAX_MESSAGE_BYTES = 1048588
# Decompressed bytes produced per step.
CHUNK = 64 * 1024
# Snappy's densest code is a 3-byte copy of 64 bytes: a block claiming more than this many times its
# own size is corrupt (checked before anything is allocated for it).
_SNAPPY_MAX_RATIO = 22


def max_inflated_size(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """The most the records of one batch may decompress to, for a topic's max.message.bytes."""
    return INFLATE_FACTOR * max(max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES)


DEFAULT_MAX_INFLATED = max_inflated_size()


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)  # zigzag
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise rb.InvalidRecordBatch("truncated varint in record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise rb.InvalidRecordBatch("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise rb.InvalidRecordBatch(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """All of ``data`` decompressed at once: for clients and tests, never for the broker reading
    what a client sent (see iter_records and friends, which stream with a bound)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        raw = bytes(data)
        if raw.startswith(_XERIAL_MAGIC):
            out = bytearray()
            pos = 16  # magic (8) + version (4) + compatible version (4)
            while pos < len(raw):
                (n,) = struct.unpack_from(">i", raw, pos)
                out += cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + n])
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise rb.InvalidRecordBatch(f"unknown compression codec {codec}")


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]]
    | Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    codec: int = NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes_extra: int = 0,
    timestamps: Sequence[int] | None = None,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """Encode (key, value[, headers]) pairs as one v2 batch, valid CRC included."""
    body = bytearray()
    max_ts = timestamp_ms
    for i, rec in enumerate(records):
        key: bytes | None = rec[0]  # type: ignore[assignment]
        value: bytes | None = rec[1]  # type: ignore[assignment]
        headers: Sequence[tuple[str, bytes | None]] = rec[2] if len(rec) > 2 else ()  # type: ignore[misc,assignment]
        ts = timestamps[i] if timestamps is not None else timestamp_ms
        max_ts = max(max_ts, ts)
        delta = offset_deltas[i] if offset_deltas is not None else i
        r = bytearray([0])  # record attributes
        _write_varint(r, ts - timestamp_ms)
        _write_varint(r, delta)
        _write_bytes(r, key)
        _write_bytes(r, value)
        _write_varint(r, len(headers))
        for hk, hv in headers:
            _write_bytes(r, hk.encode())
            _write_bytes(r, hv)
        _write_varint(body, len(r))
        body += r
    payload = compress(codec, bytes(body))
    last_delta = (offset_deltas[-1] if offset_deltas else len(records) - 1) if records else 0
    attributes = codec | attributes_extra
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        last_delta,
        timestamp_ms,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + payload
    crc = crc32c.crc32c(tail)
    batch_length = 4 + 1 + 4 + len(tail)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc) + tail


# ---- reading records: a batch's records bytes, decompressed a chunk at a time --------------------


class RecordsReader:
    """The records bytes of one batch, read front to back: the batch's own bytes when it is not
    compressed, otherwise decompressed CHUNK bytes at a time into a buffer that holds no more than the
    record being read (``need``) or a chunk (``skip``). Raises InvalidRecordBatch when the records
    run out early, do not decompress, or would decompress to more than ``max_size`` bytes."""

    __slots__ = ("buf", "pos", "max_size", "_chunks")

    def __init__(self, buf: bytes | bytearray | memoryview, header: rb.BatchHeader,
                 max_size: int = DEFAULT_MAX_INFLATED) -> None:
        payload = memoryview(buf)[header.position + rb.HEADER_SIZE : header.position + header.size]
        self.max_size = max_size
        self.pos = 0
        self.buf: bytearray | memoryview
        self._chunks: Iterator[bytes | memoryview] | None
        if header.compression == NONE:
            self.buf, self._chunks = payload, None
        else:
            self.buf, self._chunks = bytearray(), _inflate(header.compression, payload, max_size)

    def fill(self, n: int) -> int:
        """Bring up to ``n`` bytes after ``pos`` into ``buf`` (``pos`` may move: the bytes before it
        are dropped); returns how many there are, fewer than ``n`` only at the end of the records."""
        buf = self.buf
        available = len(buf) - self.pos
        if available >= n or self._chunks is None:
            return available
        assert isinstance(buf, bytearray)
        if self.pos:
            del buf[: self.pos]
            self.pos = 0
        for chunk in self._chunks:
            buf += chunk
            if len(buf) >= n:
                break
        return len(buf)

    def need(self, n: int) -> None:
        """``n`` bytes from ``pos`` in ``buf`` (one record, to parse in place)."""
        if (n > self.max_size and self._chunks is not None) or self.fill(n) < n:
            raise rb.InvalidRecordBatch("record length out of bounds")

    def skip(self, n: int) -> None:
        """Move ``pos`` ``n`` bytes on, decompressing what is skipped without keeping it."""
        available = len(self.buf) - self.pos
        if n <= available:
            self.pos += n
            return
        if self._chunks is not None:
            n -= available
            buf = self.buf
            assert isinstance(buf, bytearray)
            buf.clear()
            self.pos = 0
            for chunk in self._chunks:
                if len(chunk) >= n:
                    buf += chunk[n:]
                    return
                n -= len(chunk)
        raise rb.InvalidRecordBatch("record length out of bounds")

    def varint(self) -> int:
        self.fill(10)
        value, self.pos = _read_varint(self.buf, self.pos)
        return value

    def at_end(self) -> bool:
        return self.fill(1) == 0


def _inflate(codec: int, data: memoryview, max_size: int) -> Iterator[bytes | memoryview]:
    """``data`` decompressed, CHUNK bytes at most at a time, never more than ``max_size`` in all."""
    name = CODEC_NAMES.get(codec, str(codec))
    chunks: Iterator[bytes | memoryview]
    if codec == GZIP:
        chunks = _zlib_chunks(data)
    elif codec == SNAPPY:
        chunks = _snappy_chunks(data, max_size)
    elif codec == LZ4:
        chunks = _frame_chunks(_lz4_decompressor, data)
    elif codec == ZSTD:
        chunks = _frame_chunks(_zstd_decompressor, data)
    else:
        raise rb.InvalidRecordBatch(f"unknown compression codec {codec}")
    total = 0
    try:
        for chunk in chunks:
            total += len(chunk)
            if total > max_size:
                raise rb.InvalidRecordBatch(f"{name} batch decompresses to more than {max_size} bytes")
            yield chunk
    except (rb.InvalidRecordBatch, ImportError):  # a missing decompressor is no corrupt batch
        raise
    except Exception as e:  # each library has its own errors (zlib.error, ZstdError, RuntimeError, ...)
        raise rb.InvalidRecordBatch(f"cannot decompress {name} batch: {e}") from None


def _zlib_chunks(data: memoryview) -> Iterator[bytes]:
    """gzip members one after the other, as Java's GZIPInputStream reads them."""
    pending = bytes(data)
    while pending:
        d = zlib.decompressobj(wbits=31)
        while not d.eof:
            out = d.decompress(pending, CHUNK)
            if not out and len(d.unconsumed_tail) == len(pending):
                raise rb.InvalidRecordBatch("truncated gzip data")
            pending = d.unconsumed_tail
            if out:
                yield out
        pending = d.unused_data


def _zstd_decompressor() -> Any:
    try:
        zstd = importlib.import_module("compression.zstd")  # the standard library from Python 3.14
    except ImportError:
        zstd = importlib.import_module("backports.zstd")
    return zstd.ZstdDecompressor()


def _lz4_decompressor() -> Any:
    return importlib.import_module("lz4.frame").LZ4FrameDecompressor()


def _frame_chunks(new: Callable[[], Any], data: memoryview) -> Iterator[bytes]:
    """Frames one after the other through a decompressor with zlib's bounded-output interface
    (decompress(data, max_length), needs_input, eof, unused_data)."""
    pending = bytes(data)
    while pending:
        d = new()
        out = d.decompress(pending, CHUNK)
        idle = 0
        while True:
            if out:
                idle = 0
                yield out
            else:
                idle += 1
            if d.eof:
                break
            if d.needs_input or idle > 100:
                raise rb.InvalidRecordBatch("truncated compressed data")
            out = d.decompress(b"", CHUNK)
        pending = d.unused_data


def _snappy_chunks(data: memoryview, max_size: int) -> Iterator[bytes | memoryview]:
    """Snappy block by block (one block, or the blocks of Java's xerial framing): each block states
    its decompressed length, checked before the block is inflated."""
    total = 0
    for block in _snappy_blocks(bytes(data)):
        n = cramjam.snappy.decompress_raw_len(block)
        total += n
        if total > max_size:
            raise rb.InvalidRecordBatch(f"snappy batch decompresses to more than {max_size} bytes")
        if n > _SNAPPY_MAX_RATIO * len(block) + 32:
            raise rb.InvalidRecordBatch(f"snappy block of {len(block)} bytes claims {n} bytes decompressed")
        out = memoryview(bytes(cramjam.snappy.decompress_raw(block)))
        for i in range(0, len(out), CHUNK):
            yield out[i : i + CHUNK]


def iter_records(buf: bytes | bytearray | memoryview, header: rb.BatchHeader,
                 max_size: int = DEFAULT_MAX_INFLATED) -> Iterator[Record]:
    """Decode the records of one batch, decompressing as it goes (never more than ``max_size``)."""
    reader = RecordsReader(buf, header, max_size)
    for _ in range(header.records_count):
        length = reader.varint()
        if length < 0:
            raise rb.InvalidRecordBatch("record length out of bounds")
        reader.need(length)
        data, pos = reader.buf, reader.pos
        rec_end = pos + length
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos, rec_end)
        value, pos = _read_bytes(data, pos, rec_end)
        n_headers, pos = _read_varint(data, pos)
        headers = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(data, pos, rec_end)
            hv, pos = _read_bytes(data, pos, rec_end)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != rec_end:
            raise rb.InvalidRecordBatch("record length does not match its fields")
        reader.pos = rec_end
        yield Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, tuple(headers))


def iter_timestamps(buf: bytes | bytearray | memoryview, header: rb.BatchHeader,
                    max_size: int = DEFAULT_MAX_INFLATED) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one batch; keys, values and headers are skipped, not
    kept, so a record of any size costs a chunk of memory."""
    reader = RecordsReader(buf, header, max_size)
    for _ in range(header.records_count):
        length = reader.varint()
        if length < 0:
            raise rb.InvalidRecordBatch("record length out of bounds")
        reader.fill(min(length, 21))  # attributes and two varints
        start = reader.pos
        ts_delta, pos = _read_varint(reader.buf, start + 1)
        off_delta, pos = _read_varint(reader.buf, pos)
        if pos > start + length:
            raise rb.InvalidRecordBatch("record fields overrun the record length")
        reader.skip(length)
        yield header.base_offset + off_delta, header.base_timestamp + ts_delta


def _read_bytes(data: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise rb.InvalidRecordBatch("record field out of bounds")
    return bytes(data[pos : pos + n]), pos + n


def null_key_indexes(buf: bytes | bytearray | memoryview, header: rb.BatchHeader, max_size: int,
                     limit: int | None = None) -> list[int]:
    """Batch-relative indexes of the records without a key (key length < 0) in one batch.

    For produce to compacted topics: walks each record only as far as its key length; values and
    headers are skipped (decompressed a chunk at a time, not kept). A compressed batch whose records
    would decompress to more than ``max_size`` bytes is refused as corrupt. With ``limit``, the walk
    stops at that many keyless records. Raises InvalidRecordBatch when the records do not fill the
    batch exactly as ``records_count`` says.
    """
    reader = RecordsReader(buf, header, max_size)
    out: list[int] = []
    for i in range(header.records_count):
        length = reader.varint()
        if length < 0:
            raise rb.InvalidRecordBatch("record length out of bounds")
        reader.fill(min(length, 31))  # attributes and three varints
        start = reader.pos
        data = reader.buf
        p = start + 1  # past the attributes byte
        _, p = _read_varint(data, p)  # timestamp delta
        _, p = _read_varint(data, p)  # offset delta
        key_len, p = _read_varint(data, p)
        if p + max(key_len, 0) > start + length:
            raise rb.InvalidRecordBatch("record fields overrun the record length")
        if key_len < 0:
            out.append(i)
            if len(out) == limit:
                return out
        reader.skip(length)
    if not reader.at_end():
        raise rb.InvalidRecordBatch("record batch holds more bytes than its records")
    return out


def _snappy_blocks(raw: bytes) -> list[memoryview]:
    """The raw snappy blocks of a batch payload: one, or the blocks of Java's xerial framing."""
    mv = memoryview(raw)
    if not raw.startswith(_XERIAL_MAGIC):
        return [mv]
    blocks = []
    pos = 16  # magic (8) + version (4) + compatible version (4)
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise rb.InvalidRecordBatch("truncated snappy block length")
        (n,) = struct.unpack_from(">i", raw, pos)
        if n < 0 or pos + 4 + n > len(raw):
            raise rb.InvalidRecordBatch("snappy block length out of bounds")
        blocks.append(mv[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return blocks


def read_all(buf: bytes) -> list[Record]:
    """Every record in a buffer of whole batches."""
    out: list[Record] = []
    for h in rb.iter_batches(buf):
        out.extend(iter_records(buf, h))
    return out
