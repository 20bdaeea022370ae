"""The values of a consumer-protocol group's records in __consumer_offsets (KIP-848), Kafka 4's bytes.

Each value is an int16 version (0 for all of them) and then the flexible encoding: compact strings
and arrays, uuids, and tagged fields at the end of every struct. Tagged fields that later Kafka
versions add (the metadata hash of 4.1, say) are skipped when read and never written. The keys are
in coordinator/records.py (``ConsumerGroupKey``); a null value is a tombstone.

| type | value |
|---|---|
| 3 ConsumerGroupMetadata | the group epoch |
| 4 ConsumerGroupPartitionMetadata | the subscribed topics: id, name, partition count |
| 5 ConsumerGroupMemberMetadata | instance id, rack, client id and host, subscription, rebalance timeout, assignor |
| 6 ConsumerGroupTargetAssignmentMetadata | the epoch of the target assignment |
| 7 ConsumerGroupTargetAssignmentMember | a member's partitions in the target assignment |
| 8 ConsumerGroupCurrentMemberAssignment | a member's epoch, previous epoch, state, partitions, pending revocation |
| 16 ConsumerGroupRegularExpression | the topics a regular expression resolved to, when |
"""

from __future__ import annotations

import dataclasses
import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.serial import writers as w
from kio.static.primitive import i8, i16, i32, i64, uvarint

from strom.coordinator import records as rec
from strom.coordinator.records import RecordFormatError

VALUE_VERSION = 0

# A topic's partitions: (topic id, sorted partitions), in topic id order.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    # Tagged field 0, ClassicMemberMetadata: set for a member that uses the classic protocol in a
    # consumer group (online migration): its session timeout and its JoinGroup's protocols.
    classic_member: ClassicMember | None = None


@dataclass(frozen=True, slots=True)
class ClassicMember:
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned_partitions: TopicPartitions = ()
    partitions_pending_revocation: TopicPartitions = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int  # which resolution of the group's regular expressions this is
    timestamp: int  # when it was resolved (ms)


ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                      | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
                      | ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue
                      | ConsumerGroupRegularExpressionValue)


# --- writing ---


def _strings(buf: io.BytesIO, items: Sequence[str]) -> None:
    w.write_compact_array_length(buf, len(items))
    for item in items:
        w.write_compact_string(buf, item)


def _topic_partitions(buf: io.BytesIO, topics: TopicPartitions) -> None:
    w.write_compact_array_length(buf, len(topics))
    for topic_id, partitions in topics:
        w.write_uuid(buf, topic_id)
        w.write_compact_array_length(buf, len(partitions))
        for p in partitions:
            w.write_int32(buf, i32(p))
        w.write_empty_tagged_fields(buf)


def _classic_member_tag(buf: io.BytesIO, classic: ClassicMember) -> None:
    """The struct's tagged fields: just tag 0, the ClassicMemberMetadata."""
    field = io.BytesIO()
    w.write_int32(field, i32(classic.session_timeout_ms))
    w.write_compact_array_length(field, len(classic.supported_protocols))
    for name, metadata in classic.supported_protocols:
        w.write_compact_string(field, name)
        w.write_unsigned_varint(field, uvarint(len(metadata) + 1))  # compact bytes
        field.write(metadata)
        w.write_empty_tagged_fields(field)
    w.write_empty_tagged_fields(field)
    data = field.getvalue()
    w.write_unsigned_varint(buf, uvarint(1))  # one tagged field
    w.write_unsigned_varint(buf, uvarint(0))  # tag 0
    w.write_unsigned_varint(buf, uvarint(len(data)))
    buf.write(data)


def _read_classic_member(data: bytes) -> ClassicMember:
    r = rec.Reader(data, flexible=True)
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(r.array_length()):
        name, metadata = r.string(), r.bytes_()
        r.skip_tagged_fields()
        protocols.append((name, metadata))
    r.skip_tagged_fields()
    return ClassicMember(session_timeout_ms, tuple(protocols))


def encode_value(value: ConsumerGroupValue) -> bytes:
    buf = io.BytesIO()
    w.write_int16(buf, i16(VALUE_VERSION))
    match value:
        case ConsumerGroupMetadataValue():
            w.write_int32(buf, i32(value.epoch))
        case ConsumerGroupPartitionMetadataValue():
            w.write_compact_array_length(buf, len(value.topics))
            for t in value.topics:
                w.write_uuid(buf, t.topic_id)
                w.write_compact_string(buf, t.topic_name)
                w.write_int32(buf, i32(t.num_partitions))
                w.write_compact_array_length(buf, 0)  # PartitionMetadata (racks): unused since 4.0
                w.write_empty_tagged_fields(buf)
        case ConsumerGroupMemberMetadataValue():
            w.write_nullable_compact_string(buf, value.instance_id)
            w.write_nullable_compact_string(buf, value.rack_id)
            w.write_compact_string(buf, value.client_id)
            w.write_compact_string(buf, value.client_host)
            _strings(buf, value.subscribed_topic_names)
            w.write_nullable_compact_string(buf, value.subscribed_topic_regex)
            w.write_int32(buf, i32(value.rebalance_timeout_ms))
            w.write_nullable_compact_string(buf, value.server_assignor)
            if value.classic_member is not None:
                _classic_member_tag(buf, value.classic_member)
                return buf.getvalue()
        case ConsumerGroupTargetAssignmentMetadataValue():
            w.write_int32(buf, i32(value.assignment_epoch))
        case ConsumerGroupTargetAssignmentMemberValue():
            _topic_partitions(buf, value.topic_partitions)
        case ConsumerGroupCurrentMemberAssignmentValue():
            w.write_int32(buf, i32(value.member_epoch))
            w.write_int32(buf, i32(value.previous_member_epoch))
            w.write_int8(buf, i8(value.state))
            _topic_partitions(buf, value.assigned_partitions)
            _topic_partitions(buf, value.partitions_pending_revocation)
        case ConsumerGroupRegularExpressionValue():
            _strings(buf, value.topics)
            w.write_int64(buf, i64(value.version))
            w.write_int64(buf, i64(value.timestamp))
    w.write_empty_tagged_fields(buf)
    return buf.getvalue()


# --- reading ---


def _read_strings(r: rec.Reader) -> tuple[str, ...]:
    return tuple(r.string() for _ in range(r.array_length()))


def _read_topic_partitions(r: rec.Reader) -> TopicPartitions:
    out = []
    for _ in range(r.array_length()):
        topic_id = r.uuid()
        partitions = tuple(r.int32() for _ in range(r.array_length()))
        r.skip_tagged_fields()  # AssignmentEpochs (KIP-1251), when a later Kafka wrote it
        out.append((topic_id, partitions))
    return tuple(out)


def decode_value(record_type: int, data: bytes) -> ConsumerGroupValue:
    """The value of a record of ``record_type`` (3-8, 16); RecordFormatError for bytes that are not one."""
    r = rec.Reader(data, flexible=True)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown version {version} of a consumer group record of type {record_type}")
    value: ConsumerGroupValue
    if record_type == rec.CONSUMER_GROUP_METADATA:
        value = ConsumerGroupMetadataValue(r.int32())
    elif record_type == rec.CONSUMER_GROUP_PARTITION_METADATA:
        topics = []
        for _ in range(r.array_length()):
            topic_id, name, count = r.uuid(), r.string(), r.int32()
            for _ in range(r.array_length()):  # PartitionMetadata: partition, racks
                r.int32()
                _read_strings(r)
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            topics.append(TopicMetadata(topic_id, name, count))
        value = ConsumerGroupPartitionMetadataValue(tuple(topics))
    elif record_type == rec.CONSUMER_GROUP_MEMBER_METADATA:
        value = ConsumerGroupMemberMetadataValue(
            instance_id=r.nullable_string(), rack_id=r.nullable_string(), client_id=r.string(),
            client_host=r.string(), subscribed_topic_names=_read_strings(r),
            subscribed_topic_regex=r.nullable_string(), rebalance_timeout_ms=r.int32(),
            server_assignor=r.nullable_string())
        tagged = r.tagged_fields()
        if 0 in tagged:
            value = dataclasses.replace(value, classic_member=_read_classic_member(tagged[0]))
        return value
    elif record_type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        value = ConsumerGroupTargetAssignmentMetadataValue(r.int32())
    elif record_type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        value = ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(r))
    elif record_type == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        value = ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=r.int32(), previous_member_epoch=r.int32(), state=r.int8(),
            assigned_partitions=_read_topic_partitions(r), partitions_pending_revocation=_read_topic_partitions(r))
    elif record_type == rec.CONSUMER_GROUP_REGULAR_EXPRESSION:
        value = ConsumerGroupRegularExpressionValue(_read_strings(r), r.int64(), r.int64())
    else:
        raise RecordFormatError(f"record type {record_type} is not a consumer group record")
    r.skip_tagged_fields()  # e.g. the metadata hash (4.1) of ConsumerGroupMetadata
    return value
