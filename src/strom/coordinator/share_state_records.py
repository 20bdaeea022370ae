"""The records of __share_group_state (KIP-932's share coordinator), Kafka 4's bytes.

Keys are an int16 record type, then the share partition: group id, topic id, partition.
- 0 ShareSnapshot -> ShareSnapshotValue v0: snapshot epoch, state epoch, leader epoch, start
  offset, create and write timestamps, state batches — a share partition's whole state;
- 1 ShareUpdate -> ShareUpdateValue v0: snapshot epoch, leader epoch, start offset, state batches
  — applied over the last snapshot (batches override the offsets they cover; those below the new
  start offset go).
A state batch is (first offset, last offset, delivery state 0 available / 2 acknowledged /
4 archived, delivery count). Values are flexible; tagged fields a later Kafka adds are skipped.
A share partition lives in partition abs(hash("group:topicId:partition")) % partitions, Kafka's rule.
"""

from __future__ import annotations

import base64
import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.serial import writers as w
from kio.static.primitive import i8, i16, i32, i64

from strom.coordinator import records as rec
from strom.coordinator.records import RecordFormatError

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4  # the persisted delivery states


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's SharePartitionKey.asCoordinatorKey: what picks the state topic's partition."""
        return f"{self.group_id}:{kafka_uuid(self.topic_id)}:{self.partition}"


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateValue:
    """A ShareSnapshotValue (``snapshot`` True) or a ShareUpdateValue."""

    snapshot: bool
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...]
    state_epoch: int = 0  # snapshots only
    create_timestamp: int = -1  # snapshots only
    write_timestamp: int = -1  # snapshots only


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def encode_key(record_type: int, key: SharePartitionKey) -> bytes:
    out = rec.Writer().int16(record_type).string(key.group_id)
    out.buf += key.topic_id.bytes
    out.int32(key.partition)
    return bytes(out.buf)


def decode_key(data: bytes) -> tuple[int, SharePartitionKey]:
    r = rec.Reader(data)
    record_type = r.int16()
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise RecordFormatError(f"record type {record_type} is not a share state record")
    return record_type, SharePartitionKey(r.string(), r.uuid(), r.int32())


def encode_value(value: ShareStateValue) -> bytes:
    buf = io.BytesIO()
    w.write_int16(buf, i16(0))
    w.write_int32(buf, i32(value.snapshot_epoch))
    if value.snapshot:
        w.write_int32(buf, i32(value.state_epoch))
    w.write_int32(buf, i32(value.leader_epoch))
    w.write_int64(buf, i64(value.start_offset))
    if value.snapshot:
        w.write_int64(buf, i64(value.create_timestamp))
        w.write_int64(buf, i64(value.write_timestamp))
    w.write_compact_array_length(buf, len(value.batches))
    for b in value.batches:
        w.write_int64(buf, i64(b.first_offset))
        w.write_int64(buf, i64(b.last_offset))
        w.write_int8(buf, i8(b.delivery_state))
        w.write_int16(buf, i16(b.delivery_count))
        w.write_empty_tagged_fields(buf)
    w.write_empty_tagged_fields(buf)
    return buf.getvalue()


def decode_value(record_type: int, data: bytes) -> ShareStateValue:
    r = rec.Reader(data, flexible=True)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown version {version} of a share state record")
    snapshot = record_type == SHARE_SNAPSHOT
    snapshot_epoch = r.int32()
    state_epoch = r.int32() if snapshot else 0
    leader_epoch = r.int32()
    start_offset = r.int64()
    create_ts = write_ts = -1
    if snapshot:
        create_ts, write_ts = r.int64(), r.int64()
    batches = []
    for _ in range(r.array_length()):
        batches.append(PersistedBatch(r.int64(), r.int64(), r.int8(), r.int16()))
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return ShareStateValue(snapshot, snapshot_epoch, leader_epoch, start_offset, tuple(batches), state_epoch,
                           create_ts, write_ts)


def merge_batches(old: Sequence[PersistedBatch], new: Sequence[PersistedBatch],
                  start_offset: int) -> tuple[PersistedBatch, ...]:
    """``new`` over ``old`` (Kafka's ShareCoordinatorShard merge): new batches win on the offsets
    they cover; nothing below ``start_offset`` stays."""
    out: list[PersistedBatch] = []
    for b in old:
        pieces = [(max(b.first_offset, start_offset), b.last_offset)]
        for n in new:
            cut = []
            for first, last in pieces:
                if n.last_offset < first or n.first_offset > last:
                    cut.append((first, last))
                    continue
                if first < n.first_offset:
                    cut.append((first, n.first_offset - 1))
                if last > n.last_offset:
                    cut.append((n.last_offset + 1, last))
            pieces = cut
        out += [PersistedBatch(f, la, b.delivery_state, b.delivery_count) for f, la in pieces if f <= la]
    for n in new:
        first = max(n.first_offset, start_offset)
        if first <= n.last_offset:
            out.append(PersistedBatch(first, n.last_offset, n.delivery_state, n.delivery_count))
    return tuple(sorted(out, key=lambda b: b.first_offset))
