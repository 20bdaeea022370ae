"""Keys and values of the __consumer_offsets topic, byte-compatible with Kafka.

Records are told apart by the key's leading int16 (the key "version" of old Kafka, the record type
of Kafka 4's coordinator records):
- 0/1 ``OffsetCommitKey`` (group, topic, partition) -> ``OffsetCommitValue`` (we write v3),
- 2 ``GroupMetadataKey`` (group) -> ``GroupMetadataValue`` (we write v3),
- 3-8 and 16 ``ConsumerGroupKey``: a consumer-protocol group's records (KIP-848), whose values are
  in coordinator/consumer_records.py.
A null value is a tombstone. Values v0-v4 are read (v4 is the flexible encoding) so a log written by
any Kafka version loads; keys of other types (share and streams groups) are skipped.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """Bytes that are not a valid __consumer_offsets key or value."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


# Kafka 4's record types of a consumer-protocol group (CoordinatorRecordType), keys and values alike.
CONSUMER_GROUP_METADATA = 3  # (group) -> group epoch
CONSUMER_GROUP_PARTITION_METADATA = 4  # (group) -> the subscribed topics' partition counts
CONSUMER_GROUP_MEMBER_METADATA = 5  # (group, member) -> the member's subscription
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6  # (group) -> the target assignment's epoch
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7  # (group, member) -> the member's target partitions
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8  # (group, member) -> its epochs and partitions now
CONSUMER_GROUP_REGULAR_EXPRESSION = 16  # (group, regex) -> the topics it resolved to
_CONSUMER_GROUP_KEYS_WITH_MEMBER = frozenset({5, 7, 8, 16})
CONSUMER_GROUP_RECORD_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a consumer-protocol group's record: its type, the group, and for the per-member
    records the member id (for type 16, the regular expression)."""

    record_type: int
    group: str
    sub: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only value v1 carries it


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default=())


# --- writing (non-flexible versions only: that is all we write) ---


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int16(self, v: int) -> _Writer:
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> _Writer:
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> _Writer:
        self.buf += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.int16(-1)
        data = v.encode()
        self.int16(len(data))
        self.buf += data
        return self

    def bytes_(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.buf += v
        return self


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    w = _Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic).int32(key.partition)
    return bytes(w.buf)


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return bytes(_Writer().int16(GROUP_METADATA_KEY_VERSION).string(key.group).buf)


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    w = _Writer().int16(key.record_type).string(key.group)
    if key.record_type in _CONSUMER_GROUP_KEYS_WITH_MEMBER:
        w.string(key.sub or "")
    return bytes(w.buf)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    w = _Writer().int16(OFFSET_COMMIT_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
    w.string(value.metadata).int64(value.commit_timestamp)
    return bytes(w.buf)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer().int16(GROUP_METADATA_VALUE_VERSION).string(value.protocol_type).int32(value.generation)
    w.string(value.protocol).string(value.leader).int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout).int32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.buf)


# --- reading (classic and flexible encodings) ---


class _Reader:
    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def _length(self, classic_width: int) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int16() if classic_width == 2 else self.int32()

    def nullable_string(self) -> str | None:
        n = self._length(2)
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null in a non-nullable string")
        return s

    def bytes_(self) -> bytes:
        n = self._length(4)
        return b"" if n < 0 else self._take(n)

    def array_length(self) -> int:
        n = self._length(4)
        if n > len(self.data):  # each element takes at least a byte
            raise RecordFormatError("array length out of bounds")
        return max(n, 0)

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()

    def tagged_fields(self) -> dict[int, bytes]:
        """A flexible struct's tagged fields: tag -> its bytes (read with a Reader of their own)."""
        out: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                out[tag] = self._take(self.uvarint())
        return out


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | None:
    """The key of a __consumer_offsets record; None for record types this coordinator does not own."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    if version in CONSUMER_GROUP_RECORD_TYPES:
        group = r.string()
        return ConsumerGroupKey(version, group, r.string() if version in _CONSUMER_GROUP_KEYS_WITH_MEMBER else None)
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data)
    version = r.int16()
    if version < 0 or version > 4:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.int16()
    if version < 0 or version > 4:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                      session_timeout, subscription, assignment))
    r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits, signed."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's GroupMetadataManager.partitionFor: Utils.abs(groupId.hashCode) % partitions."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# The writer and reader are shared with the other coordinators' record formats (__transaction_state).
Writer = _Writer
Reader = _Reader
