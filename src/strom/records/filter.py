"""Filtering the records of one batch, for compaction (Kafka's MemoryRecords.filterTo).

Sans-IO: batch bytes in, batch bytes out. The log cleaner decides which records to keep; this module
rewrites the batch the way Kafka does, so the result is what Kafka's own cleaner would have written:

- the base offset, the last offset delta (so the producer's last sequence survives), the producer id,
  epoch and base sequence, the partition leader epoch and the attributes are kept; offsets of the kept
  records do not change (compaction leaves gaps);
- a batch that keeps every record, and needs no delete horizon, is copied byte for byte;
- a batch that keeps no record disappears, unless the caller must keep it (the last batch of an active
  producer), in which case an empty batch header remains;
- a batch that keeps tombstones gets a delete horizon (KIP-534): the attribute bit 0x40 is set and the
  base timestamp holds the time after which its tombstones may be removed. Record timestamps stay right
  because record timestamp deltas are rewritten against the new base timestamp;
- compressed batches are decompressed and recompressed with the same codec; the records are read
  through codec.RecordsReader, a chunk at a time, and a batch whose records would decompress to more
  than the caller's ``max_size`` is refused as corrupt.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from strom.records import batch as rb
from strom.records.codec import (
    DEFAULT_MAX_INFLATED,
    RecordsReader,
    _read_bytes,
    _read_varint,
    _write_varint,
    compress,
)

DELETE_HORIZON_MASK = 0x40
NO_TIMESTAMP = -1

# From the attributes field to the end of the header (the part the CRC covers, before the records).
_TAIL = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiibI")


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of a batch with its fields located, so it can be re-encoded without loss."""

    attributes: int
    timestamp: int  # absolute (batch base timestamp + delta)
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: bytes  # the header count and headers, as encoded


def delete_horizon(header: rb.BatchHeader) -> int | None:
    """The batch's delete horizon (ms) if the cleaner has set one, else None."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def parse_records(buf: bytes | memoryview, header: rb.BatchHeader,
                  max_size: int = DEFAULT_MAX_INFLATED) -> list[RawRecord]:
    """The records of the batch at ``header.position`` in ``buf`` (decompressed a chunk at a time,
    never to more than ``max_size`` bytes)."""
    reader = RecordsReader(buf, header, max_size)
    base_ts = header.base_timestamp
    out: list[RawRecord] = []
    for _ in range(header.records_count):
        length = reader.varint()
        if length <= 0:  # not even the attributes byte
            raise rb.InvalidRecordBatch("record length out of bounds")
        reader.need(length)
        data, pos = reader.buf, reader.pos
        rec_end = pos + length
        attributes = data[pos]
        pos += 1
        ts_delta, pos = _read_varint(data, pos)
        offset_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos, rec_end)
        value, pos = _read_bytes(data, pos, rec_end)
        if pos > rec_end:
            raise rb.InvalidRecordBatch("record fields overrun the record length")
        out.append(RawRecord(attributes, base_ts + ts_delta, offset_delta, key, value, bytes(data[pos:rec_end])))
        reader.pos = rec_end
    return out


def _encode_record(out: bytearray, rec: RawRecord, base_timestamp: int) -> None:
    body = bytearray([rec.attributes])
    _write_varint(body, rec.timestamp - base_timestamp)
    _write_varint(body, rec.offset_delta)
    for field_ in (rec.key, rec.value):
        if field_ is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(field_))
            body += field_
    body += rec.headers
    _write_varint(out, len(body))
    out += body


def build_filtered(
    header: rb.BatchHeader, records: list[RawRecord], horizon_ms: int | None
) -> bytes:
    """A batch like ``header``'s holding ``records`` (a non-empty subset of its own), with the delete
    horizon ``horizon_ms`` if not None."""
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    log_append_time = bool(header.attributes & rb.TIMESTAMP_TYPE_MASK)
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_ts = horizon_ms
    else:
        base_ts = records[0].timestamp
    max_ts = header.max_timestamp if log_append_time else max(r.timestamp for r in records)
    body = bytearray()
    for rec in records:
        _encode_record(body, rec, base_ts)
    payload = compress(header.compression, bytes(body))
    tail = _TAIL.pack(attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id,
                      header.producer_epoch, header.base_sequence, len(records)) + payload
    batch_length = 4 + 1 + 4 + len(tail)
    return _PREFIX.pack(header.base_offset, batch_length, header.partition_leader_epoch, 2,
                        crc32c.crc32c(tail)) + tail


def empty_batch(header: rb.BatchHeader) -> bytes:
    """Kafka's writeEmptyHeader: the batch's offsets, producer fields and max timestamp, no records."""
    attributes = header.attributes & (rb.TIMESTAMP_TYPE_MASK | rb.TRANSACTIONAL_MASK | rb.CONTROL_MASK)
    tail = _TAIL.pack(attributes, header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp,
                      header.producer_id, header.producer_epoch, header.base_sequence, 0)
    return _PREFIX.pack(header.base_offset, 4 + 1 + 4 + len(tail), header.partition_leader_epoch, 2,
                        crc32c.crc32c(tail)) + tail


@dataclass(frozen=True, slots=True)
class FilterResult:
    data: bytes | None  # the batch to write (the original bytes, a rewritten batch), or None: dropped
    retained: int  # records kept
    removed: int  # records dropped
    horizon_ms: int | None  # delete horizon of the written batch if it still holds tombstones


def filter_batch(
    buf: bytes,
    header: rb.BatchHeader,
    keep: Callable[[RawRecord, int], bool],
    *,
    now_ms: int,
    delete_retention_ms: int,
    keep_empty: bool,
    max_size: int = DEFAULT_MAX_INFLATED,
) -> FilterResult:
    """Apply the cleaner's decision to one batch (``buf`` holds it at ``header.position``).

    ``keep(record, offset)`` says whether a record is the latest for its key; tombstones are then
    also dropped once the batch's delete horizon has passed. ``keep_empty`` keeps an empty batch
    header when every record goes (the last batch of an active producer). ``max_size`` bounds what
    the batch's records may decompress to (codec.max_inflated_size of the topic's max.message.bytes).
    """
    original = bytes(memoryview(buf)[header.position : header.position + header.size])
    if header.is_control:
        return FilterResult(original, header.records_count, 0, None)
    records = parse_records(buf, header, max_size)
    horizon = delete_horizon(header)
    retain_deletes = horizon is None or now_ms < horizon
    kept = [
        r for r in records
        if keep(r, header.base_offset + r.offset_delta) and (r.value is not None or retain_deletes)
    ]
    removed = len(records) - len(kept)
    has_tombstones = any(r.value is None for r in kept)
    need_horizon = has_tombstones and horizon is None
    new_horizon = now_ms + delete_retention_ms if need_horizon else horizon
    live_horizon = new_horizon if has_tombstones else None
    if not kept:  # an empty batch stays only while it is its producer's last (Kafka's RETAIN_EMPTY)
        if not keep_empty:
            return FilterResult(None, 0, removed, None)
        return FilterResult(original if not records else empty_batch(header), 0, removed, None)
    if not removed and not need_horizon:
        return FilterResult(original, len(kept), 0, live_horizon)
    return FilterResult(build_filtered(header, kept, new_horizon), len(kept), removed, live_horizon)
