"""Consumer-protocol groups (KIP-848) in the group coordinator, beside the classic ones: the
heartbeat, session and rebalance expiry through the shard's timer queue, and what offset commits
and fetches from their members must carry (Kafka's GroupMetadataManager for consumer groups).

One group id is one type. A ConsumerGroupHeartbeat joining a classic group that has members
converts it when group.consumer.migration.policy allows, and answers GROUP_ID_NOT_FOUND otherwise;
an empty classic group (one that only holds offsets) becomes a consumer group. Classic requests
for a consumer group with members are served by it (coordinator/migration.py); an empty consumer
group becomes classic again.

Committed offsets stay where the classic groups keep theirs (an offsets-only ClassicGroup under
the same id), so OffsetCommit records, replay and retention are shared. The groups themselves are
written to __consumer_offsets in Kafka 4's records (coordinator/consumer_group_log.py) after each
operation that changes them, and read back when a partition is loaded: after a restart, or when the
coordinator moves, members keep their ids, epochs and partitions and simply go on heartbeating.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from strom.coordinator.api import ConsumerMemberDescription, DescribedConsumerGroup, ListedGroup
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupSettings,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicImage,
)
from strom.coordinator.consumer_protocol import PROTOCOL_TYPE
from strom.coordinator.group import ClassicGroup, GroupState
from strom.coordinator.reconciliation import Assignment, MemberState, StaleMemberEpoch, check_commit_epoch
from strom.coordinator.timers import TimerQueue
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.coordinator")

MEMBER_TIMER = "consumer-member"  # (MEMBER_TIMER, group id, member id): its session or revocation deadline


def settings_from(config: GroupConfig) -> ConsumerGroupSettings:
    return ConsumerGroupSettings(heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
                                 session_timeout_ms=config.consumer_session_timeout_ms,
                                 max_size=config.consumer_max_size,
                                 assignors=config.consumer_assignors)


def group_state(group: ConsumerGroup) -> str:
    """Kafka's ConsumerGroup.ConsumerGroupState, as ListGroups and ConsumerGroupDescribe name it."""
    if not group.members:
        return "Empty"
    if group.group_epoch > group.target_epoch:
        return "Assigning"
    return "Stable" if group.is_stable() else "Reconciling"


class ConsumerGroupManager:
    def __init__(self, config: GroupConfig, groups: dict[str, ConsumerGroup], classic: dict[str, ClassicGroup],
                 timers: TimerQueue) -> None:
        self.settings = settings_from(config)
        self.groups = groups
        self.classic = classic
        self.timers = timers
        # group id -> member id -> (client id, client host), for ConsumerGroupDescribe
        self.clients: dict[str, dict[str, tuple[str, str]]] = {}

    # ------------------------------------------------------------------ the heartbeat

    def heartbeat(self, now: int, req: HeartbeatRequest, topics: Mapping[str, TopicImage],
                  client: tuple[str, str] = ("", "")) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat (``client``: its client id and host); raises HeartbeatError
        with Kafka's error."""
        group = self.groups.get(req.group_id)
        created = group is None
        if group is None:
            classic = self.classic.get(req.group_id)
            if classic is not None and not is_empty_classic(classic):
                raise HeartbeatError(E.group_id_not_found, f"Group {req.group_id} is not a consumer group.")
            # Made for a join; any other heartbeat finds no member (after a restart, say: it
            # gets UNKNOWN_MEMBER_ID and joins again).
            group = ConsumerGroup(req.group_id)
        response = group.heartbeat(req, topics, self.settings, now)
        if created and group.members:
            self.groups[req.group_id] = group
            log.info("created consumer group %s", req.group_id)
        member = group.members.get(response.member_id or "")
        key = (MEMBER_TIMER, req.group_id, response.member_id)
        clients = self.clients.setdefault(req.group_id, {})
        if member is None:
            self.timers.cancel(key)
        else:
            self.schedule(req.group_id, member.member_id, group)
            clients[member.member_id] = client
        for gone in [m for m in clients if m not in group.members]:
            del clients[gone]
        return response

    def on_loaded(self, now: int, group: ConsumerGroup) -> None:
        """A group read back from __consumer_offsets: its members' clocks start now (Kafka's
        onLoaded): a session timeout each, and the rebalance timeout of those still revoking."""
        log.info("loaded consumer group %s with %d members at group epoch %d", group.group_id, len(group.members),
                 group.group_epoch)
        for member in group.members.values():
            session_ms = (member.classic.session_timeout_ms if member.classic is not None
                          else self.settings.session_timeout_ms)  # a classic member keeps its own
            member.session_deadline = now + session_ms
            member.revocation_deadline = (now + max(member.rebalance_timeout_ms, 0)
                                          if member.assignment.state is MemberState.UNREVOKED_PARTITIONS else None)
            self.schedule(group.group_id, member.member_id, group)

    def schedule(self, group_id: str, member_id: str, group: ConsumerGroup) -> None:
        """(Re)arm the member's timer at its earliest deadline."""
        member = group.members[member_id]
        deadline = member.session_deadline
        if member.revocation_deadline is not None:
            deadline = min(deadline, member.revocation_deadline)
        self.timers.schedule((MEMBER_TIMER, group_id, member_id), deadline)

    def forget(self, group_id: str, member_id: str) -> None:
        """A member removed from the group: no timer, no client."""
        self.timers.cancel((MEMBER_TIMER, group_id, member_id))
        self.clients.get(group_id, {}).pop(member_id, None)

    def on_member_timer(self, now: int, group_id: str, member_id: str) -> ConsumerGroupMember | None:
        """A member's deadline passed: expire it (its partitions go to the others at their next
        heartbeats; returns it), or, when it heartbeat meanwhile, wait for its new deadline."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return None
        if member_id in group.expired(now):
            member = group.members[member_id]
            if now >= member.session_deadline:
                why = "session timeout"
            elif member.uses_classic_protocol:
                why = "rebalance timeout (no JoinGroup or SyncGroup in time)"
            else:
                why = "rebalance timeout (partitions not revoked)"
            group.remove_member(member_id)
            self.clients.get(group_id, {}).pop(member_id, None)
            log.info("consumer group %s: member %s removed after its %s; group epoch %d", group_id, member_id, why,
                     group.group_epoch)
            return member
        self.schedule(group_id, member_id, group)
        return None

    # ------------------------------------------------------------------ group type

    def blocks_classic(self, group_id: str) -> bool:
        """A classic request for ``group_id``: True when it is a consumer group with members (the
        request gets GROUP_ID_NOT_FOUND). An empty consumer group is dropped: it becomes classic."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if group.members:
            return True
        del self.groups[group_id]
        return False

    def drop_unused(self) -> None:
        """Forget empty consumer groups that hold no offsets any more."""
        for group_id in [g for g, group in self.groups.items() if not group.members and g not in self.classic]:
            del self.groups[group_id]

    def is_active(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    # ------------------------------------------------------------------ offsets

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int,
                        api_version: int | None = None) -> E | None:
        """OffsetCommit (and TxnOffsetCommit) to a consumer group (Kafka's
        ConsumerGroup.validateOffsetCommit): without a member epoch only while the group is empty;
        otherwise from a member at its current epoch, with OffsetCommit v9 or later (an older
        version cannot carry the member epoch: UNSUPPORTED_VERSION). None: the group is not a
        consumer group."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return E.none
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if api_version is not None and api_version < 9 and not member.uses_classic_protocol:
            return E.unsupported_version
        return _check_epoch(member, member_epoch)

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> E:
        """OffsetFetch v9+ with a member id and epoch (Kafka's ConsumerGroup.validateOffsetFetch)."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return E.none
        member = group.members.get(member_id or "")
        if member is None:
            return E.unknown_member_id
        return _check_epoch(member, member_epoch)  # the same rule as for commits

    # ------------------------------------------------------------------ describing

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        """ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for an unknown or a classic group."""
        group = self.groups.get(group_id)
        if group is None:
            classic = self.classic.get(group_id)
            if classic is not None and not classic.is_in(GroupState.DEAD):
                return DescribedConsumerGroup(group_id, E.group_id_not_found,
                                              f"Group {group_id} is not a consumer group.")
            return DescribedConsumerGroup(group_id, E.group_id_not_found, f"Group {group_id} not found.")
        clients = self.clients.get(group_id, {})
        members = tuple(
            ConsumerMemberDescription(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, *clients.get(m.member_id, ("", "")),
                tuple(sorted(m.subscribed_topic_names)), m.subscribed_topic_regex,
                _sorted(m.assignment.assigned), _sorted(group.target.get(m.member_id, {})),
                m.uses_classic_protocol)
            for m in group.members.values())
        return DescribedConsumerGroup(group_id, E.none, None, group_state(group), group.group_epoch,
                                      group.target_epoch, group.assignor_name(self.settings), members)

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListedGroup]:
        if types is not None and "consumer" not in types:
            return []
        out = []
        for group in self.groups.values():
            state = group_state(group)
            if states is not None and state.lower() not in states:
                continue
            out.append(ListedGroup(group.group_id, PROTOCOL_TYPE, state, "consumer"))
        return out


def _check_epoch(member: ConsumerGroupMember, member_epoch: int) -> E:
    """Kafka's validateMemberEpoch: a member of the classic protocol commits with its generation,
    which is its member epoch (ILLEGAL_GENERATION when it is another)."""
    try:
        check_commit_epoch(member.assignment, member_epoch)
    except StaleMemberEpoch:
        return E.illegal_generation if member.uses_classic_protocol else E.stale_member_epoch
    return E.none


def is_empty_classic(group: ClassicGroup) -> bool:
    """A classic group a consumer group may replace: no members, nothing under way."""
    return group.is_in(GroupState.EMPTY, GroupState.DEAD) and not group.members and not group.pending_members


def _sorted(assignment: Assignment) -> dict[uuid.UUID, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in assignment.items() if ps}
