"""A consumer-protocol group (KIP-848; Kafka's ConsumerGroup and the heartbeat half of its
GroupMetadataManager): members, the group epoch, the target assignment and each member's way to it.

The broker computes the assignment. Any change the group must react to (a member joins or leaves,
a subscription changes, a subscribed topic gains partitions) bumps the group epoch; the target
assignment is then recomputed by the server-side assignor (coordinator/assignors.py) for that epoch,
and every member reconciles towards its share at its own pace, one heartbeat at a time
(coordinator/reconciliation.py): revoking first, never pausing what stays.

Pure: operations take the time and the topics image and return what the heartbeat answers; the
shard (timers, records in __consumer_offsets) builds on it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from strom.coordinator.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    MemberSubscription,
    PartitionAssignor,
    SubscribedTopicDescriber,
    UnsupportedAssignor,
    get_assignor,
)
from strom.coordinator.config import INTERNAL_TOPICS
from strom.coordinator.reconciliation import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    FencedMemberEpoch,
    MemberAssignment,
    MemberState,
    check_heartbeat_epoch,
    reconcile,
)
from strom.protocol.errors import ErrorCode as E


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic as the coordinator sees it in the metadata: its id and partition count."""

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields (None: not sent, unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # TopicPartitions: what the member says it owns


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: E = E.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # sent when it changed, or on a full heartbeat


class HeartbeatError(Exception):
    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that keeps using the classic protocol in a consumer group brings along
    (Kafka's ConsumerGroupMemberMetadataValue.ClassicMemberMetadata): its session timeout and the
    protocols (client assignors, with their subscription bytes) of its last JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=lambda: MemberAssignment(0, -1))
    # When the member is expired (ms): no heartbeat within the session timeout, or partitions
    # still not revoked within its rebalance timeout.
    session_deadline: int = 0
    revocation_deadline: int | None = None
    # Set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) in this group
    # (coordinator/migration.py); its revocation_deadline is then its join or sync deadline.
    classic: ClassicMemberMetadata | None = None

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """The broker's group.consumer.* settings that the group applies."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors, the first is the default


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """What a subscribed regular expression matched (Kafka's ResolvedRegularExpression): the topic
    names, which resolution of the group found them (``version``), and when (ms)."""

    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target_epoch: int = 0  # the group epoch the target assignment was computed for
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_partitions: dict[uuid.UUID, int] = field(default_factory=dict)  # what the target saw
    subscribed_names: dict[uuid.UUID, str] = field(default_factory=dict)  # their names, for the records
    # (topic id, partition) -> epoch of the member holding it (assigned or pending revocation)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # The members' regular expressions, resolved once per change of the topic names (not at every
    # heartbeat): regex -> what it matched, and the topic names that was against (None: not yet).
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    regex_topic_names: frozenset[str] | None = None

    # ------------------------------------------------------------------ the heartbeat

    def heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, TopicImage],
                  settings: ConsumerGroupSettings, now: int = 0) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat: join, stay, reconcile or leave. Errors are Kafka's, raised as
        HeartbeatError (INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID,
        GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION)."""
        _validate(req, settings)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        member, joined = self._member_for(req, settings)
        if req.member_epoch != JOIN_EPOCH:
            try:
                check_heartbeat_epoch(member.assignment, req.member_epoch, req.owned)
            except FencedMemberEpoch as e:
                raise HeartbeatError(E.fenced_member_epoch, str(e)) from None
        changed = self._update_subscription(member, req) or joined
        if self._refresh_subscribed_partitions(topics, now) or changed:
            self.group_epoch += 1
        if self.group_epoch > self.target_epoch:
            self._compute_target(topics, settings)
        before = member.assignment
        owned = req.owned if req.member_epoch != JOIN_EPOCH else {}
        after = reconcile(before, self.target_epoch, self.target.get(member.member_id, {}), owned,
                          self._owner_epoch)
        self._hold(member, after)
        member.session_deadline = now + settings.session_timeout_ms
        if after.state is not MemberState.UNREVOKED_PARTITIONS:
            member.revocation_deadline = None
        elif before.state is not MemberState.UNREVOKED_PARTITIONS or member.revocation_deadline is None:
            member.revocation_deadline = now + max(member.rebalance_timeout_ms, 0)
        full = req.member_epoch == JOIN_EPOCH or (req.owned is not None and _nonempty(req.owned) != _nonempty(after.assigned))
        send = full or after.assigned != before.assigned or after.member_epoch != before.member_epoch
        return HeartbeatResponse(member_id=member.member_id, member_epoch=after.member_epoch,
                                 heartbeat_interval_ms=settings.heartbeat_interval_ms,
                                 assignment=_nonempty(after.assigned) if send else None)

    def expired(self, now: int) -> list[str]:
        """Members to remove now: silent for a session timeout (a static member that left for now
        too), or holding partitions it was told to revoke past its rebalance timeout (Kafka fences
        it: its partitions go to others)."""
        return sorted(m.member_id for m in self.members.values()
                      if now >= m.session_deadline
                      or (m.revocation_deadline is not None and now >= m.revocation_deadline))

    def remove_member(self, member_id: str) -> bool:
        """A member leaves or is expired (session timeout, rebalance timeout): its partitions are
        free at once and the group moves to a new epoch. False when it is not a member."""
        member = self.members.pop(member_id, None)
        if member is None:
            return False
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self._release(member.assignment)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return True

    # ------------------------------------------------------------------ the steps

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResponse:
        member = self.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(E.unknown_member_id, f"member {req.member_id} is not in group {self.group_id}")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            if member.instance_id is None:
                raise HeartbeatError(E.invalid_request, "member epoch -2 is for static members only")
            # A static member away for now keeps its partitions (held, not fetched) until it is
            # back or its session expires; the group does not rebalance.
            self._hold(member, replace(member.assignment, member_epoch=STATIC_LEAVE_EPOCH))
            member.revocation_deadline = None
        else:
            self.remove_member(member.member_id)
        return HeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)

    def _member_for(self, req: HeartbeatRequest, settings: ConsumerGroupSettings) -> tuple[ConsumerGroupMember, bool]:
        """The heartbeating member, made on a join: (member, whether it is new to the group)."""
        if req.member_epoch != JOIN_EPOCH:
            member = self.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(E.unknown_member_id, f"member {req.member_id} is not in group {self.group_id}")
            return member, False
        if req.instance_id is not None and (old_id := self.static_members.get(req.instance_id)) is not None:
            old = self.members[old_id]
            if old.member_epoch != STATIC_LEAVE_EPOCH and old_id != req.member_id:
                raise HeartbeatError(E.unreleased_instance_id,
                                     f"instance {req.instance_id} is still held by member {old_id}")
            # The same static member back: it takes over its predecessor's partitions and epoch.
            del self.members[old_id]
            member = replace(old, member_id=req.member_id or str(uuid.uuid4()))
            member.assignment = replace(old.assignment, member_epoch=old.assignment.previous_member_epoch
                                        if old.member_epoch == STATIC_LEAVE_EPOCH else old.member_epoch)
            if old_id in self.target:
                self.target[member.member_id] = self.target.pop(old_id)
            self.members[member.member_id] = member
            self.static_members[req.instance_id] = member.member_id
            return member, False
        member = self.members.get(req.member_id) if req.member_id else None
        if member is not None:  # rejoining after being fenced: starts afresh
            self._release(member.assignment)
            member.assignment = MemberAssignment(0, -1)
            return member, False
        if len(self.members) >= settings.max_size:
            raise HeartbeatError(E.group_max_size_reached,
                                 f"group {self.group_id} has reached group.consumer.max.size={settings.max_size}")
        member = ConsumerGroupMember(req.member_id or str(uuid.uuid4()), instance_id=req.instance_id)
        self.members[member.member_id] = member
        if req.instance_id is not None:
            self.static_members[req.instance_id] = member.member_id
        return member, True

    def _update_subscription(self, member: ConsumerGroupMember, req: HeartbeatRequest) -> bool:
        """Take the fields the heartbeat sent; True when what the assignor sees changed."""
        changed = False
        if req.subscribed_topic_names is not None and frozenset(req.subscribed_topic_names) != member.subscribed_topic_names:
            member.subscribed_topic_names = frozenset(req.subscribed_topic_names)
            changed = True
        if req.subscribed_topic_regex is not None and (req.subscribed_topic_regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
            changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id = req.rack_id
            changed = True
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        return changed

    def subscribed_topic_names(self, member: ConsumerGroupMember, topics: Mapping[str, TopicImage]) -> set[str]:
        """The member's subscription resolved against the topics that exist: its names, and the
        names its regular expression matches in full (internal topics never)."""
        names = {n for n in member.subscribed_topic_names if n in topics}
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            matched = resolved.topics if resolved is not None else _resolve(member.subscribed_topic_regex, topics)
            names |= {n for n in matched if n in topics}
        return names

    def _resolve_regexes(self, topics: Mapping[str, TopicImage], now: int) -> None:
        """Resolve the members' regular expressions again if the topic names changed since the last
        time, or one is new; forget those no member uses any more."""
        wanted = {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}
        for gone in self.resolved_regexes.keys() - wanted:
            del self.resolved_regexes[gone]
        if not wanted:
            self.regex_topic_names = None
            return
        names = frozenset(topics)
        stale = wanted if names != self.regex_topic_names else wanted - self.resolved_regexes.keys()
        self.regex_topic_names = names
        if not stale:
            return
        version = max((r.version for r in self.resolved_regexes.values()), default=0) + 1
        for regex in stale:
            matched = frozenset(_resolve(regex, topics))
            old = self.resolved_regexes.get(regex)
            if old is None or old.topics != matched:  # unchanged results keep their record as is
                self.resolved_regexes[regex] = ResolvedRegex(matched, version, now)

    def _refresh_subscribed_partitions(self, topics: Mapping[str, TopicImage], now: int = 0) -> bool:
        """The partition counts of every topic some member subscribes to; True when they differ
        from what the target assignment was computed with (a topic appeared, grew or went)."""
        self._resolve_regexes(topics, now)
        counts: dict[uuid.UUID, int] = {}
        names: dict[uuid.UUID, str] = {}
        for member in self.members.values():
            for name in self.subscribed_topic_names(member, topics):
                image = topics[name]
                counts[image.topic_id] = image.partitions
                names[image.topic_id] = name
        if counts == self.subscribed_partitions:
            return False
        self.subscribed_partitions = counts
        self.subscribed_names = names
        return True

    def _compute_target(self, topics: Mapping[str, TopicImage], settings: ConsumerGroupSettings) -> None:
        assignor = self._assignor(settings)
        members = [
            MemberSubscription(
                member_id=m.member_id,
                subscribed_topic_ids=frozenset(topics[n].topic_id for n in self.subscribed_topic_names(m, topics)),
                assignment=self.target.get(m.member_id, {}),
                instance_id=m.instance_id, rack_id=m.rack_id)
            for m in sorted(self.members.values(), key=lambda m: m.member_id)]
        result = assignor.assign(members, SubscribedTopicDescriber(dict(self.subscribed_partitions)))
        self.target = {member_id: {t: frozenset(ps) for t, ps in parts.items() if ps}
                       for member_id, parts in result.items()}
        self.target_epoch = self.group_epoch

    def assignor_name(self, settings: ConsumerGroupSettings) -> str:
        """The assignor the group uses now ("" when the one asked for is not offered)."""
        try:
            return self._assignor(settings).name
        except HeartbeatError:
            return ""

    def _assignor(self, settings: ConsumerGroupSettings) -> PartitionAssignor:
        """The assignor the members ask for (group.remote.assignor); the broker's first otherwise."""
        available = {name: ASSIGNORS[name] for name in settings.assignors if name in ASSIGNORS}
        wanted = sorted({m.server_assignor for m in self.members.values() if m.server_assignor})
        name = wanted[0] if wanted else (settings.assignors[0] if settings.assignors else DEFAULT_ASSIGNOR)
        try:
            return get_assignor(name, available)
        except UnsupportedAssignor:
            raise HeartbeatError(E.unsupported_assignor, f"assignor {name} is not one of {list(available)}") from None

    # ------------------------------------------------------------------ who holds what

    def _owner_epoch(self, topic: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic, partition), -1)

    def _release(self, assignment: MemberAssignment) -> None:
        for held in (assignment.assigned, assignment.pending_revocation):
            for topic, parts in held.items():
                for p in parts:
                    self.partition_epochs.pop((topic, p), None)

    def _hold(self, member: ConsumerGroupMember, assignment: MemberAssignment) -> None:
        self._release(member.assignment)
        member.assignment = assignment
        for held in (assignment.assigned, assignment.pending_revocation):
            for topic, parts in held.items():
                for p in parts:
                    self.partition_epochs[(topic, p)] = assignment.member_epoch

    def is_stable(self) -> bool:
        """Every member at the target epoch with nothing left to revoke or to receive."""
        return all(m.assignment.state is MemberState.STABLE and m.member_epoch == self.target_epoch
                   for m in self.members.values())


def _resolve(regex: str, topics: Mapping[str, TopicImage]) -> set[str]:
    """The topics a subscribed regular expression matches in full (internal topics never)."""
    pattern = re.compile(regex)
    return {n for n in topics if n not in INTERNAL_TOPICS and pattern.fullmatch(n)}


def _nonempty(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: ps for t, ps in assignment.items() if ps}


def _validate(req: HeartbeatRequest, settings: ConsumerGroupSettings) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, for what the group itself checks."""
    if not req.group_id:
        raise HeartbeatError(E.invalid_request, "GroupId can't be empty.")
    if req.instance_id == "":
        raise HeartbeatError(E.invalid_request, "InstanceId can't be empty.")
    if req.member_epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError(E.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is not None and _nonempty(req.owned):
            raise HeartbeatError(E.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise HeartbeatError(E.invalid_request,
                                 "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH) or req.member_epoch > 0:
        if not req.member_id:
            raise HeartbeatError(E.invalid_request, "MemberId can't be empty.")
    else:
        raise HeartbeatError(E.invalid_request, f"MemberEpoch {req.member_epoch} is invalid.")
    if req.subscribed_topic_regex:
        try:
            re.compile(req.subscribed_topic_regex)
        except re.error as e:
            raise HeartbeatError(E.invalid_regular_expression, f"SubscribedTopicRegex is invalid: {e}") from None
    if req.server_assignor is not None and req.server_assignor not in settings.assignors:
        raise HeartbeatError(E.unsupported_assignor,
                             f"ServerAssignor {req.server_assignor} is not one of {list(settings.assignors)}")
