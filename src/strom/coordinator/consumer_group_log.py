"""How consumer-protocol groups (KIP-848) live in __consumer_offsets: the records that bring the log
up to a group's state after an operation, and the replay that rebuilds the groups when a partition
is loaded (Kafka's GroupCoordinatorRecordHelpers and the consumer-group half of
GroupMetadataManager.replay).

A group is kept as Kafka 4 keeps it, one record per fact (coordinator/consumer_records.py): its
epoch, the subscribed topics, each member's subscription, the target assignment (its epoch and each
member's share), each member's current assignment, the resolved regular expressions. An operation
changes the group in memory; ``records(group_id)`` then compares the group with what was last
written for it and returns only the records that changed, in Kafka's order (a leaving member's
current assignment, target and subscription tombstones first; the group's epoch tombstone last when
the group goes). The runtime appends them before it answers, so a client never hears of a state the
log does not hold.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from strom.coordinator import consumer_records as cr
from strom.coordinator import records as rec
from strom.coordinator.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    ResolvedRegex,
)
from strom.coordinator.reconciliation import Assignment, MemberAssignment, MemberState
from strom.coordinator.result import Record

# Kafka's MemberState values in ConsumerGroupCurrentMemberAssignmentValue.State.
_STATE_VALUES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
                 MemberState.UNRELEASED_PARTITIONS: 2, MemberState.UNKNOWN: 127}
_STATES = {v: k for k, v in _STATE_VALUES.items()}

# What a member's subscription record holds (client id and host included).
MemberMetadata = tuple[str | None, str | None, str, str, frozenset[str], str | None, int, str | None,
                       ClassicMemberMetadata | None]
Clients = dict[str, dict[str, tuple[str, str]]]  # group id -> member id -> (client id, client host)


@dataclass
class _Written:
    """What the log holds of one group (the last values written; identity tells what is unchanged:
    the group replaces these objects, it never changes one in place)."""

    epoch: int | None = None
    partitions: dict[uuid.UUID, int] | None = None
    target_epoch: int | None = None
    target_map: dict[str, Assignment] | None = None  # the group's target dict these targets came from
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, MemberAssignment] = field(default_factory=dict)
    regexes: dict[str, ResolvedRegex] = field(default_factory=dict)


class ConsumerGroupLog:
    def __init__(self, groups: dict[str, ConsumerGroup], clients: Clients) -> None:
        self.groups = groups
        self.clients = clients
        self.written: dict[str, _Written] = {}
        self._loading: set[str] = set()

    # ------------------------------------------------------------------ writing

    def records(self, group_id: str, member_id: str | None = None) -> list[Record]:
        """The records that bring the log to the group's state now (tombstones if it is gone).
        ``member_id``: the only member the operation may have changed (a heartbeat's), so that the
        others need not be compared when the membership and the target assignment are as written."""
        group = self.groups.get(group_id)
        old = self.written.get(group_id)
        if (member_id is not None and group is not None and old is not None and member_id in old.members
                and member_id in group.members and len(old.members) == len(group.members)
                and group.target is old.target_map):
            return self._member_records(group, old, member_id)
        if group is None:
            if old is None:
                return []
            del self.written[group_id]
            return _group_tombstones(group_id, old)
        if old is None:
            old = _Written()
        new = self._snapshot(group)
        out: list[Record] = []
        key = _Keys(group_id)
        for member_id in old.members.keys() - new.members.keys():
            # A member leaves: Kafka's removeMember order.
            out += [key.current(member_id, None), key.target(member_id, None), key.member(member_id, None)]
        for regex in old.regexes.keys() - new.regexes.keys():
            out.append(key.regex(regex, None))
        for member_id, meta in new.members.items():
            if old.members.get(member_id) != meta:
                out.append(key.member(member_id, _member_value(meta)))
        for regex, resolved in new.regexes.items():
            if old.regexes.get(regex) is not resolved:
                out.append(key.regex(regex, _regex_value(resolved)))
        if old.partitions is not new.partitions and old.partitions != new.partitions:
            out.append(_partition_metadata(key, group))
        if old.epoch != new.epoch:
            out.append(key.group(rec.CONSUMER_GROUP_METADATA, cr.ConsumerGroupMetadataValue(group.group_epoch)))
        for member_id, target in new.targets.items():
            before = old.targets.get(member_id)
            if before is not target and (before is None or before != target):
                out.append(key.target(member_id, cr.ConsumerGroupTargetAssignmentMemberValue(_partitions(target))))
        for member_id in old.targets.keys() - new.targets.keys() - (old.members.keys() - new.members.keys()):
            out.append(key.target(member_id, None))
        if old.target_epoch != new.target_epoch:
            out.append(key.group(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                 cr.ConsumerGroupTargetAssignmentMetadataValue(group.target_epoch)))
        for member_id, current in new.current.items():
            before_current = old.current.get(member_id)
            if before_current is not current and (before_current is None or before_current != current):
                out.append(key.current(member_id, _current_value(current)))
        self.written[group_id] = new
        return out

    def _member_records(self, group: ConsumerGroup, old: _Written, member_id: str) -> list[Record]:
        """``records`` when only ``member_id`` and the group-wide facts may have changed."""
        out: list[Record] = []
        key = _Keys(group.group_id)
        member = group.members[member_id]
        meta = _member_metadata(member, self.clients.get(group.group_id, {}).get(member_id, ("", "")))
        if old.members[member_id] != meta:
            out.append(key.member(member_id, _member_value(meta)))
            old.members[member_id] = meta
        if old.regexes != group.resolved_regexes:
            for regex in old.regexes.keys() - group.resolved_regexes.keys():
                out.append(key.regex(regex, None))
            for regex, resolved in group.resolved_regexes.items():
                if old.regexes.get(regex) is not resolved:
                    out.append(key.regex(regex, _regex_value(resolved)))
            old.regexes = dict(group.resolved_regexes)
        if old.partitions is not group.subscribed_partitions and old.partitions != group.subscribed_partitions:
            out.append(_partition_metadata(key, group))
        old.partitions = group.subscribed_partitions
        if old.epoch != group.group_epoch:
            out.append(key.group(rec.CONSUMER_GROUP_METADATA, cr.ConsumerGroupMetadataValue(group.group_epoch)))
            old.epoch = group.group_epoch
        target = group.target.get(member_id)
        before = old.targets.get(member_id)
        if target is not before and target != before:
            out.append(key.target(member_id, None if target is None else
                                  cr.ConsumerGroupTargetAssignmentMemberValue(_partitions(target))))
            if target is None:
                del old.targets[member_id]
            else:
                old.targets[member_id] = target
        if old.target_epoch != group.target_epoch:
            out.append(key.group(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                 cr.ConsumerGroupTargetAssignmentMetadataValue(group.target_epoch)))
            old.target_epoch = group.target_epoch
        current = member.assignment
        if old.current[member_id] is not current and old.current[member_id] != current:
            out.append(key.current(member_id, _current_value(current)))
        old.current[member_id] = current
        return out

    def _snapshot(self, group: ConsumerGroup) -> _Written:
        clients = self.clients.get(group.group_id, {})
        return _Written(
            epoch=group.group_epoch, partitions=group.subscribed_partitions, target_epoch=group.target_epoch,
            target_map=group.target,
            members={m.member_id: _member_metadata(m, clients.get(m.member_id, ("", "")))
                     for m in group.members.values()},
            targets={m: t for m, t in group.target.items() if m in group.members},
            current={m.member_id: m.assignment for m in group.members.values()},
            regexes=dict(group.resolved_regexes))

    # ------------------------------------------------------------------ loading

    def replay(self, key: rec.ConsumerGroupKey, data: bytes | None) -> None:
        """Apply one record read from the log (Kafka's replay): a value creates the group if need
        be; tombstones remove what they name."""
        group_id, sub = key.group, key.sub or ""
        group = self.groups.get(group_id)
        if data is None:
            if group is not None:
                self._tombstone(group, key.record_type, sub)
            return
        value = cr.decode_value(key.record_type, data)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        self._loading.add(group_id)
        match value:
            case cr.ConsumerGroupMetadataValue():
                group.group_epoch = value.epoch
            case cr.ConsumerGroupPartitionMetadataValue():
                group.subscribed_partitions = {t.topic_id: t.num_partitions for t in value.topics}
                group.subscribed_names = {t.topic_id: t.topic_name for t in value.topics}
            case cr.ConsumerGroupMemberMetadataValue():
                member = group.members.get(sub) or ConsumerGroupMember(sub)
                group.members[sub] = member
                member.instance_id = value.instance_id
                member.rack_id = value.rack_id
                member.subscribed_topic_names = frozenset(value.subscribed_topic_names)
                member.subscribed_topic_regex = value.subscribed_topic_regex
                member.rebalance_timeout_ms = value.rebalance_timeout_ms
                member.server_assignor = value.server_assignor
                classic = value.classic_member
                member.classic = (None if classic is None else
                                  ClassicMemberMetadata(classic.session_timeout_ms, classic.supported_protocols))
                self.clients.setdefault(group_id, {})[sub] = (value.client_id, value.client_host)
            case cr.ConsumerGroupTargetAssignmentMetadataValue():
                group.target_epoch = value.assignment_epoch
            case cr.ConsumerGroupTargetAssignmentMemberValue():
                group.target[sub] = _assignment(value.topic_partitions)
            case cr.ConsumerGroupCurrentMemberAssignmentValue():
                member = group.members.get(sub) or ConsumerGroupMember(sub)
                group.members[sub] = member
                member.assignment = MemberAssignment(
                    value.member_epoch, value.previous_member_epoch, _STATES.get(value.state, MemberState.UNKNOWN),
                    _assignment(value.assigned_partitions), _assignment(value.partitions_pending_revocation))
            case cr.ConsumerGroupRegularExpressionValue():
                group.resolved_regexes[sub] = ResolvedRegex(frozenset(value.topics), value.version, value.timestamp)

    def _tombstone(self, group: ConsumerGroup, record_type: int, sub: str) -> None:
        if record_type == rec.CONSUMER_GROUP_METADATA:
            del self.groups[group.group_id]  # the group is gone (its other tombstones came first)
            self.clients.pop(group.group_id, None)
            self.written.pop(group.group_id, None)
            self._loading.discard(group.group_id)
        elif record_type == rec.CONSUMER_GROUP_PARTITION_METADATA:
            group.subscribed_partitions = {}
            group.subscribed_names = {}
        elif record_type == rec.CONSUMER_GROUP_MEMBER_METADATA:
            group.members.pop(sub, None)
            self.clients.get(group.group_id, {}).pop(sub, None)
        elif record_type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.target_epoch = 0
        elif record_type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(sub, None)
        elif record_type == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            if sub in group.members:
                group.members[sub].assignment = MemberAssignment(0, -1)
        elif record_type == rec.CONSUMER_GROUP_REGULAR_EXPRESSION:
            group.resolved_regexes.pop(sub, None)

    def loaded(self) -> list[ConsumerGroup]:
        """Loading is over: the groups it rebuilt, with what follows from their records (who holds
        which partition, the static members) filled in, and their state taken as written."""
        out = []
        for group_id in sorted(self._loading):
            group = self.groups.get(group_id)
            if group is None:
                continue
            group.static_members = {m.instance_id: m.member_id for m in group.members.values()
                                    if m.instance_id is not None}
            group.partition_epochs = {}
            for member in group.members.values():
                for held in (member.assignment.assigned, member.assignment.pending_revocation):
                    for topic, parts in held.items():
                        for p in parts:
                            group.partition_epochs[(topic, p)] = member.member_epoch
            self.written[group_id] = self._snapshot(group)
            out.append(group)
        self._loading.clear()
        return out

    def unload(self, group_id: str) -> None:
        """The group moved to another coordinator: forget it (its records stay in the log)."""
        self.groups.pop(group_id, None)
        self.clients.pop(group_id, None)
        self.written.pop(group_id, None)
        self._loading.discard(group_id)


class _Keys:
    """The records of one group, key by key."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id

    def _record(self, record_type: int, sub: str | None, value: cr.ConsumerGroupValue | None) -> Record:
        key = rec.encode_consumer_group_key(rec.ConsumerGroupKey(record_type, self.group_id, sub))
        return Record(self.group_id, key, None if value is None else cr.encode_value(value))

    def group(self, record_type: int, value: cr.ConsumerGroupValue | None) -> Record:
        return self._record(record_type, None, value)

    def member(self, member_id: str, value: cr.ConsumerGroupMemberMetadataValue | None) -> Record:
        return self._record(rec.CONSUMER_GROUP_MEMBER_METADATA, member_id, value)

    def target(self, member_id: str, value: cr.ConsumerGroupTargetAssignmentMemberValue | None) -> Record:
        return self._record(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, member_id, value)

    def current(self, member_id: str, value: cr.ConsumerGroupCurrentMemberAssignmentValue | None) -> Record:
        return self._record(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id, value)

    def regex(self, regex: str, value: cr.ConsumerGroupRegularExpressionValue | None) -> Record:
        return self._record(rec.CONSUMER_GROUP_REGULAR_EXPRESSION, regex, value)


def _group_tombstones(group_id: str, old: _Written) -> list[Record]:
    """A deleted group's tombstones, in Kafka's order (ConsumerGroup.createGroupTombstoneRecords)."""
    key = _Keys(group_id)
    members = sorted(old.members.keys() | old.current.keys() | old.targets.keys())
    out = [key.current(m, None) for m in members]
    out += [key.target(m, None) for m in members]
    out.append(key.group(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None))
    out += [key.member(m, None) for m in members]
    out += [key.regex(r, None) for r in sorted(old.regexes)]
    out.append(key.group(rec.CONSUMER_GROUP_PARTITION_METADATA, None))
    out.append(key.group(rec.CONSUMER_GROUP_METADATA, None))
    return out


def _partition_metadata(key: _Keys, group: ConsumerGroup) -> Record:
    return key.group(rec.CONSUMER_GROUP_PARTITION_METADATA, cr.ConsumerGroupPartitionMetadataValue(tuple(
        cr.TopicMetadata(t, group.subscribed_names.get(t, ""), n) for t, n in sorted(group.subscribed_partitions.items()))))


def _regex_value(resolved: ResolvedRegex) -> cr.ConsumerGroupRegularExpressionValue:
    return cr.ConsumerGroupRegularExpressionValue(tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp)


def _member_metadata(member: ConsumerGroupMember, client: tuple[str, str]) -> MemberMetadata:
    return (member.instance_id, member.rack_id, client[0], client[1], member.subscribed_topic_names,
            member.subscribed_topic_regex, member.rebalance_timeout_ms, member.server_assignor, member.classic)


def _member_value(meta: MemberMetadata) -> cr.ConsumerGroupMemberMetadataValue:
    instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout_ms, assignor, classic = meta
    return cr.ConsumerGroupMemberMetadataValue(
        instance_id, rack_id, client_id, client_host, tuple(sorted(names)), regex, rebalance_timeout_ms, assignor,
        None if classic is None else cr.ClassicMember(classic.session_timeout_ms, classic.protocols))


def _current_value(assignment: MemberAssignment) -> cr.ConsumerGroupCurrentMemberAssignmentValue:
    return cr.ConsumerGroupCurrentMemberAssignmentValue(
        assignment.member_epoch, assignment.previous_member_epoch, _STATE_VALUES[assignment.state],
        _partitions(assignment.assigned), _partitions(assignment.pending_revocation))


def _partitions(assignment: Assignment) -> cr.TopicPartitions:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def _assignment(partitions: cr.TopicPartitions) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in partitions if ps}
