"""A share group (KIP-932; Kafka's ShareGroup and the share half of GroupMetadataManager): members,
the group epoch, the target assignment and each member's current one.

The assignment is Kafka's SimpleAssignor: every member gets every partition of the topics it
subscribes to, so any number of members share one partition (records, not partitions, are what
the share partitions hand out one at a time). Partitions are never revoked from one member for
another, so a member moves straight to the target at its next heartbeat. A change of membership,
subscriptions or the subscribed topics' partition counts bumps the group epoch and recomputes the
target at that epoch.

Pure: operations take the time and the topics image and return what the heartbeat answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.coordinator.consumer_group import TopicImage
from strom.protocol.errors import ErrorCode as E

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

Assignment = dict[uuid.UUID, frozenset[int]]


class ShareHeartbeatError(Exception):
    def __init__(self, error: E, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged since the last answer


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    max_size: int = 200  # group.share.max.size


@dataclass
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned: Assignment = field(default_factory=dict)
    session_deadline: int = 0


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    target_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_partitions: dict[uuid.UUID, int] = field(default_factory=dict)
    subscribed_names: dict[uuid.UUID, str] = field(default_factory=dict)
    # The topic partitions whose share state the share coordinator was asked to hold (Kafka's
    # ShareGroupStatePartitionMetadata InitializedTopics).
    initialized: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState, as ListGroups and ShareGroupDescribe name it."""
        if not self.members:
            return "Empty"
        return "Stable" if all(m.member_epoch == self.target_epoch for m in self.members.values()) else "Reconciling"

    def heartbeat(self, req: ShareHeartbeatRequest, topics: Mapping[str, TopicImage], settings: ShareGroupSettings,
                  now: int, client: tuple[str, str] = ("", "")) -> ShareHeartbeatResponse:
        _validate(req)
        if req.member_epoch == LEAVE_EPOCH:
            if self.remove_member(req.member_id) is None:
                raise ShareHeartbeatError(E.unknown_member_id, f"member {req.member_id} is not in group {self.group_id}")
            return ShareHeartbeatResponse(req.member_id, LEAVE_EPOCH)
        member = self.members.get(req.member_id)
        changed = False
        if member is None:
            if req.member_epoch != JOIN_EPOCH:
                raise ShareHeartbeatError(E.unknown_member_id, f"member {req.member_id} is not in group {self.group_id}")
            if len(self.members) >= settings.max_size:
                raise ShareHeartbeatError(E.group_max_size_reached,
                                          f"group {self.group_id} has reached group.share.max.size={settings.max_size}")
            member = self.members[req.member_id] = ShareGroupMember(req.member_id)
            changed = True
        elif req.member_epoch not in (JOIN_EPOCH, member.member_epoch, member.previous_member_epoch):
            raise ShareHeartbeatError(E.fenced_member_epoch,
                                      f"member epoch {req.member_epoch}, the member is at {member.member_epoch}")
        member.client_id, member.client_host = client
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id = req.rack_id
        if req.subscribed_topic_names is not None:
            names = frozenset(req.subscribed_topic_names)
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
        if self._refresh_subscribed_partitions(topics) or changed:
            self.group_epoch += 1
        if self.group_epoch > self.target_epoch:
            self._compute_target(topics)
        member.session_deadline = now + settings.session_timeout_ms
        before = member.assigned
        target = self.target.get(member.member_id, {})
        if member.member_epoch != self.target_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.target_epoch
            member.assigned = target
        send = req.member_epoch == JOIN_EPOCH or member.assigned != before
        return ShareHeartbeatResponse(member.member_id, member.member_epoch, settings.heartbeat_interval_ms,
                                      dict(member.assigned) if send else None)

    def remove_member(self, member_id: str) -> ShareGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return member

    def expired(self, now: int) -> list[str]:
        return sorted(m.member_id for m in self.members.values() if now >= m.session_deadline)

    def subscribed_topic_names(self) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    def _refresh_subscribed_partitions(self, topics: Mapping[str, TopicImage]) -> bool:
        counts: dict[uuid.UUID, int] = {}
        names: dict[uuid.UUID, str] = {}
        for name in self.subscribed_topic_names():
            image = topics.get(name)
            if image is not None:
                counts[image.topic_id] = image.partitions
                names[image.topic_id] = name
        if counts == self.subscribed_partitions:
            return False
        self.subscribed_partitions = counts
        self.subscribed_names = names
        return True

    def _compute_target(self, topics: Mapping[str, TopicImage]) -> None:
        """Kafka's SimpleAssignor: each member gets every partition of each topic it subscribes to."""
        target: dict[str, Assignment] = {}
        for member in self.members.values():
            assignment: Assignment = {}
            for name in member.subscribed_topic_names:
                image = topics.get(name)
                if image is not None and image.partitions > 0:
                    assignment[image.topic_id] = frozenset(range(image.partitions))
            target[member.member_id] = assignment
        self.target = target
        self.target_epoch = self.group_epoch
        for topic_id, count in self.subscribed_partitions.items():
            self.initialized[topic_id] = frozenset(range(count))


def _validate(req: ShareHeartbeatRequest) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if not req.group_id:
        raise ShareHeartbeatError(E.invalid_request, "GroupId can't be empty.")
    if not req.member_id:
        raise ShareHeartbeatError(E.invalid_request, "MemberId can't be empty.")
    if req.member_epoch == JOIN_EPOCH:
        if req.subscribed_topic_names is None:
            raise ShareHeartbeatError(E.invalid_request, "SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise ShareHeartbeatError(E.invalid_request, f"MemberEpoch {req.member_epoch} is invalid.")
