"""A share group's records in __consumer_offsets (KIP-932), Kafka 4's bytes, and how they follow
the group: the records that bring the log up to a group's state after an operation, and the replay
that rebuilds the groups at load.

| type | key | value (v0, flexible) |
|---|---|---|
| 9 ShareGroupPartitionMetadata | group | read only (Kafka 4.0 wrote the subscribed topics; 4.1 a hash) |
| 10 ShareGroupMemberMetadata | group, member | rack, client id and host, subscribed topic names |
| 11 ShareGroupMetadata | group | group epoch, metadata hash |
| 12 ShareGroupTargetAssignmentMetadata | group | the target assignment's epoch |
| 13 ShareGroupTargetAssignmentMember | group, member | the member's target partitions |
| 14 ShareGroupCurrentMemberAssignment | group, member | member epoch, previous epoch, state, partitions |
| 15 ShareGroupStatePartitionMetadata | group | the topic partitions whose share state is initialized |

The log keeps what was last written per key; an operation's records are the keys whose bytes
changed, tombstones for those gone (a leaving member's current assignment, target and metadata
first, the group's epoch last when the group goes), as Kafka orders them.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Sequence

from kio.serial import writers as w
from kio.static.primitive import i8, i16, i32, i64

from strom.coordinator import records as rec
from strom.coordinator.records import RecordFormatError
from strom.coordinator.result import Record
from strom.coordinator.share_group import Assignment, ShareGroup, ShareGroupMember

SHARE_GROUP_PARTITION_METADATA = 9
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
SHARE_GROUP_RECORD_TYPES = frozenset(range(9, 16))
KEYS_WITH_MEMBER = frozenset({10, 13, 14})


def encode_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    out = rec.Writer().int16(record_type).string(group_id)
    if record_type in KEYS_WITH_MEMBER:
        out.string(member_id or "")
    return bytes(out.buf)


def decode_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group, member) of a share group record's key; None for other records."""
    r = rec.Reader(data)
    record_type = r.int16()
    if record_type not in SHARE_GROUP_RECORD_TYPES:
        return None
    group = r.string()
    return record_type, group, r.string() if record_type in KEYS_WITH_MEMBER else None


def _value() -> io.BytesIO:
    buf = io.BytesIO()
    w.write_int16(buf, i16(0))
    return buf


def _topic_partitions(buf: io.BytesIO, assignment: Assignment, names: dict[uuid.UUID, str] | None = None) -> None:
    items = sorted(assignment.items(), key=lambda kv: str(kv[0]))
    w.write_compact_array_length(buf, len(items))
    for topic_id, parts in items:
        w.write_uuid(buf, topic_id)
        if names is not None:
            w.write_compact_string(buf, names.get(topic_id, ""))
        w.write_compact_array_length(buf, len(parts))
        for p in sorted(parts):
            w.write_int32(buf, i32(p))
        w.write_empty_tagged_fields(buf)


def _done(buf: io.BytesIO) -> bytes:
    w.write_empty_tagged_fields(buf)
    return buf.getvalue()


def metadata_hash(group: ShareGroup) -> int:
    """A hash of the subscribed topics (id, name, partitions), signed 64 bits. Kafka 4.1 computes
    its own Murmur3 hash here to notice topic changes; a different value only makes Kafka
    recompute the assignment once."""
    text = ",".join(f"{t}:{group.subscribed_names.get(t, '')}:{n}" for t, n in sorted(
        group.subscribed_partitions.items(), key=lambda kv: str(kv[0])))
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    return value - (1 << 64) if value >= 1 << 63 else value


def group_metadata_value(group: ShareGroup) -> bytes:
    buf = _value()
    w.write_int32(buf, i32(group.group_epoch))
    w.write_int64(buf, i64(metadata_hash(group) if group.subscribed_partitions else 0))
    return _done(buf)


def member_metadata_value(member: ShareGroupMember) -> bytes:
    buf = _value()
    w.write_nullable_compact_string(buf, member.rack_id)
    w.write_compact_string(buf, member.client_id)
    w.write_compact_string(buf, member.client_host)
    names = sorted(member.subscribed_topic_names)
    w.write_compact_array_length(buf, len(names))
    for n in names:
        w.write_compact_string(buf, n)
    return _done(buf)


def target_metadata_value(epoch: int) -> bytes:
    buf = _value()
    w.write_int32(buf, i32(epoch))
    return _done(buf)


def target_member_value(assignment: Assignment) -> bytes:
    buf = _value()
    _topic_partitions(buf, assignment)
    return _done(buf)


def current_assignment_value(member: ShareGroupMember) -> bytes:
    buf = _value()
    w.write_int32(buf, i32(member.member_epoch))
    w.write_int32(buf, i32(member.previous_member_epoch))
    w.write_int8(buf, i8(0))  # MemberState STABLE: a share member has nothing to revoke
    _topic_partitions(buf, member.assigned)
    return _done(buf)


def state_partition_metadata_value(group: ShareGroup) -> bytes:
    buf = _value()
    w.write_compact_array_length(buf, 0)  # InitializingTopics: the state is made on first fetch
    _topic_partitions(buf, group.initialized, group.subscribed_names)  # InitializedTopics
    w.write_compact_array_length(buf, 0)  # DeletingTopics
    return _done(buf)


# --- reading ---


def _read_assignment(r: rec.Reader, with_names: bool = False) -> tuple[Assignment, dict[uuid.UUID, str]]:
    out: Assignment = {}
    names: dict[uuid.UUID, str] = {}
    for _ in range(r.array_length()):
        topic_id = r.uuid()
        if with_names:
            names[topic_id] = r.string()
        out[topic_id] = frozenset(r.int32() for _ in range(r.array_length()))
        r.skip_tagged_fields()
    return out, names


def _strings(r: rec.Reader) -> Sequence[str]:
    return [r.string() for _ in range(r.array_length())]


def replay(groups: dict[str, ShareGroup], record_type: int, group_id: str, member_id: str | None,
           data: bytes | None) -> None:
    """Apply one share group record (Kafka's replay): tombstones remove what they name."""
    group = groups.get(group_id)
    if data is None:
        if group is None:
            return
        if record_type == SHARE_GROUP_METADATA:
            del groups[group_id]
        elif record_type == SHARE_GROUP_MEMBER_METADATA:
            group.members.pop(member_id or "", None)
        elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(member_id or "", None)
        elif record_type == SHARE_GROUP_STATE_PARTITION_METADATA:
            group.initialized = {}
        return
    if group is None:
        group = groups[group_id] = ShareGroup(group_id)
    r = rec.Reader(data, flexible=True)
    if r.int16() != 0:
        raise RecordFormatError(f"unknown version of a share group record of type {record_type}")
    member = None
    if member_id is not None:
        member = group.members.get(member_id)
        if member is None and record_type != SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            member = group.members[member_id] = ShareGroupMember(member_id)
    if record_type == SHARE_GROUP_METADATA:
        group.group_epoch = r.int32()
    elif record_type == SHARE_GROUP_MEMBER_METADATA:
        assert member is not None
        member.rack_id = r.nullable_string()
        member.client_id = r.string()
        member.client_host = r.string()
        member.subscribed_topic_names = frozenset(_strings(r))
    elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.target_epoch = r.int32()
    elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        group.target[member_id or ""] = _read_assignment(r)[0]
    elif record_type == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        assert member is not None
        member.member_epoch = r.int32()
        member.previous_member_epoch = r.int32()
        r.int8()
        member.assigned = _read_assignment(r)[0]
    elif record_type == SHARE_GROUP_STATE_PARTITION_METADATA:
        _read_assignment(r, with_names=True)  # InitializingTopics
        group.initialized, names = _read_assignment(r, with_names=True)
        group.subscribed_names.update(names)


# --- following a group ---


class ShareGroupLog:
    """What __consumer_offsets holds of each share group (key -> value bytes, as last written)."""

    def __init__(self, groups: dict[str, ShareGroup]) -> None:
        self.groups = groups
        self.written: dict[str, dict[bytes, bytes]] = {}

    def _wanted(self, group: ShareGroup) -> tuple[dict[bytes, bytes], list[bytes], list[bytes]]:
        """(key -> value of every record, keys in Kafka's write order, member keys)"""
        g = group.group_id
        out: dict[bytes, bytes] = {}
        for m in group.members.values():
            out[encode_key(SHARE_GROUP_MEMBER_METADATA, g, m.member_id)] = member_metadata_value(m)
        out[encode_key(SHARE_GROUP_METADATA, g)] = group_metadata_value(group)
        for member_id, target in group.target.items():
            if member_id in group.members:
                out[encode_key(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, g, member_id)] = target_member_value(target)
        out[encode_key(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, g)] = target_metadata_value(group.target_epoch)
        for m in group.members.values():
            out[encode_key(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, g, m.member_id)] = current_assignment_value(m)
        out[encode_key(SHARE_GROUP_STATE_PARTITION_METADATA, g)] = state_partition_metadata_value(group)
        return out, list(out), []

    def records(self, group_id: str) -> list[Record]:
        old = self.written.get(group_id, {})
        group = self.groups.get(group_id)
        if group is None:
            if not old:
                return []
            del self.written[group_id]
            return [Record(group_id, k, None) for k in _tombstone_order(old)]
        new, order, _ = self._wanted(group)
        out = [Record(group_id, k, None) for k in _tombstone_order({k: v for k, v in old.items() if k not in new})]
        out += [Record(group_id, k, new[k]) for k in order if old.get(k) != new[k]]
        self.written[group_id] = new
        return out

    def loaded(self, group_id: str) -> None:
        """A group read back at load: its records are as the log holds them."""
        group = self.groups.get(group_id)
        if group is not None:
            self.written[group_id] = self._wanted(group)[0]

    def unload(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self.written.pop(group_id, None)


_TOMBSTONE_ORDER = {SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: 0, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: 1,
                    SHARE_GROUP_MEMBER_METADATA: 2, SHARE_GROUP_STATE_PARTITION_METADATA: 3,
                    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: 4, SHARE_GROUP_PARTITION_METADATA: 5,
                    SHARE_GROUP_METADATA: 6}


def _tombstone_order(keys: dict[bytes, bytes]) -> list[bytes]:
    return sorted(keys, key=lambda k: _TOMBSTONE_ORDER.get(int.from_bytes(k[:2], "big"), 9))
