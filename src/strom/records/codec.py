"""Building and reading the records inside v2 batches.

Not used on the produce/fetch hot path. The coordinator builds batches for __consumer_offsets,
compaction and tools look inside batches, tests check content; produce to a compacted topic reads
key lengths (null_key_indexes). Compression goes through cramjam.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import cramjam
import crc32c

from strom.records import batch as rb

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Java's snappy framing (xerial SnappyOutputStream): magic header, then length-prefixed blocks.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


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


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
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


def iter_records(buf: bytes | memoryview, header: rb.BatchHeader) -> Iterator[Record]:
    """Decode the records of one batch (decompressing if needed)."""
    mv = memoryview(buf)
    start = header.position + rb.HEADER_SIZE
    end = header.position + header.size
    data: bytes | memoryview = decompress(header.compression, mv[start:end])
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(data, pos)
        rec_end = pos + length
        if length < 0 or rec_end > len(data):
            raise rb.InvalidRecordBatch("record length out of bounds")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = _read_varint(data, pos)
        headers = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != rec_end:
            raise rb.InvalidRecordBatch("record length does not match its fields")
        yield Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, tuple(headers))


def _read_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise rb.InvalidRecordBatch("record field out of bounds")
    return bytes(data[pos : pos + n]), pos + n


def null_key_indexes(buf: bytes | bytearray | memoryview, header: rb.BatchHeader, max_size: int,
                     limit: int | None = None) -> list[int]:
    """Batch-relative indexes of the records without a key (key length < 0) in one batch.

    For produce to compacted topics: walks each record only as far as its key length, values and
    headers are skipped. A compressed batch is decompressed once, and not beyond ``max_size``
    bytes (a batch inflating past it is refused as corrupt). With ``limit``, the walk stops at
    that many keyless records. Raises InvalidRecordBatch when the records do not fill the batch
    exactly as ``records_count`` says.
    """
    mv = memoryview(buf)[header.position + rb.HEADER_SIZE : header.position + header.size]
    data = mv if header.compression == NONE else _decompress_bounded(header.compression, mv, max_size)
    read_varint = _read_varint
    end = len(data)
    pos = 0
    out: list[int] = []
    try:
        for i in range(header.records_count):
            b = data[pos]  # record length (zigzag varint; one byte is the common case)
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(data, pos)
            rec_end = pos + length
            if length < 0 or rec_end > end:
                raise rb.InvalidRecordBatch("record length out of bounds")
            p = pos + 1  # past the attributes byte
            while data[p] & 0x80:  # timestamp delta
                p += 1
            p += 1
            while data[p] & 0x80:  # offset delta
                p += 1
            b = data[p + 1]  # key length
            if b < 0x80:
                key_len, p = (b >> 1) ^ -(b & 1), p + 2
            else:
                key_len, p = read_varint(data, p + 1)
            if p + max(key_len, 0) > rec_end:
                raise rb.InvalidRecordBatch("record fields overrun the record length")
            if key_len < 0:
                out.append(i)
                if len(out) == limit:
                    return out
            pos = rec_end
    except IndexError:
        raise rb.InvalidRecordBatch("truncated record") from None
    if pos != end:
        raise rb.InvalidRecordBatch("record batch holds more bytes than its records")
    return out


def _decompress_bounded(codec: int, data: memoryview, max_size: int) -> bytes:
    """``decompress`` that refuses output larger than ``max_size`` without allocating it.

    The output goes into an anonymous mapping of ``max_size`` bytes: only the pages written are
    ever backed by memory, so a small batch costs a small buffer and a compression bomb stops at
    the cap. Snappy states its decompressed length up front, which is checked instead.
    """
    try:
        if codec == SNAPPY:
            raw = bytes(data)
            total = sum(cramjam.snappy.decompress_raw_len(block) for block in _snappy_blocks(raw))
            if total > max_size:
                raise rb.InvalidRecordBatch(f"snappy batch decompresses to {total} bytes, over {max_size}")
            return decompress(codec, raw)
        into = _DECOMPRESS_INTO.get(codec)
        if into is None:
            raise rb.InvalidRecordBatch(f"unknown compression codec {codec}")
        with mmap.mmap(-1, max(max_size, 1)) as out:
            n = into(data, out)
            return out[:n]
    except cramjam.DecompressionError as e:
        name = CODEC_NAMES.get(codec, str(codec))
        raise rb.InvalidRecordBatch(
            f"cannot decompress {name} batch (corrupt, or over {max_size} bytes decompressed): {e}") from None


_DECOMPRESS_INTO = {
    GZIP: cramjam.gzip.decompress_into,
    LZ4: cramjam.lz4.decompress_into,
    ZSTD: cramjam.zstd.decompress_into,
}


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
