"""Online migration between the classic and the consumer protocol (Kafka 4.0, KIP-848's upgrade
path; Kafka's GroupMetadataManager: convertToConsumerGroup, convertToClassicGroup and the
classicGroup*ToConsumerGroup operations).

- Upgrade: a ConsumerGroupHeartbeat that joins a classic group with members, whose protocol type is
  "consumer", converts it (policy ``upgrade`` or ``bidirectional``). Its members become members of
  the consumer group that keep speaking the classic protocol, each with the partitions its last
  assignment gave it, at the classic generation as member epoch: nothing moves that need not.
- While a consumer group has members, classic requests are served by it (whatever the policy, as
  in Kafka): JoinGroup reconciles the member towards its share of the target assignment (what it
  owns comes from its subscription's owned partitions) and answers the member epoch as the
  generation, SyncGroup answers its assigned partitions as a ConsumerProtocolAssignment, Heartbeat
  answers REBALANCE_IN_PROGRESS when it must rejoin to move on, LeaveGroup removes it. Its session
  timeout is its own (JoinGroup's); it must join within its rebalance timeout once told to rejoin,
  and sync within it once joined, or it is removed.
- Downgrade: when the last consumer-protocol member leaves (or is expired) and classic members
  remain, the group turns back into a classic group with them (policy ``downgrade`` or
  ``bidirectional``), at the group epoch as generation, and rebalances.
Committed offsets are not touched by either: they stay under the group id (coordinator/offsets.py).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from strom.coordinator.api import (
    JoinGroupRequestData,
    JoinGroupResult,
    LeaveGroupResult,
    MemberIdentity,
    SyncGroupRequestData,
    SyncGroupResult,
)
from strom.coordinator.classic import (
    ClassicGroupManager,
    group_metadata_record,
    group_tombstone,
    heartbeat_key,
    join_key,
    pending_member_key,
    sync_key,
)
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    HeartbeatError,
    HeartbeatRequest,
    TopicImage,
)
from strom.coordinator.consumer_groups import MEMBER_TIMER, ConsumerGroupManager, is_empty_classic
from strom.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolError,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from strom.coordinator.group import ClassicGroup, GroupState, Member, Token
from strom.coordinator.reconciliation import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    MemberAssignment,
    MemberState,
)
from strom.coordinator.result import CoordinatorResult, Record
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.coordinator")

Topics = Mapping[str, TopicImage]


class MigrationPolicy(enum.Enum):
    """group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @classmethod
    def parse(cls, name: str) -> MigrationPolicy:
        return cls(name.strip().lower())

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


# ---------------------------------------------------------------------- names and ids

def to_topic_ids(partitions: TopicPartitions, topics: Topics) -> dict[uuid.UUID, frozenset[int]]:
    """Partitions by topic name -> by topic id; topics that no longer exist are left out."""
    return {topics[name].topic_id: parts for name, parts in partitions.items() if name in topics and parts}


def to_topic_names(assignment: Assignment, topics: Topics) -> TopicPartitions:
    names = {image.topic_id: name for name, image in topics.items()}
    return {names[t]: ps for t, ps in assignment.items() if t in names and ps}


def _assignment_version(member: ConsumerGroupMember) -> int:
    """The ConsumerProtocol version a classic member speaks: its subscription's (Kafka answers it
    in the same version)."""
    assert member.classic is not None
    try:
        return decode_subscription(member.classic.protocols[0][1]).version if member.classic.protocols else 0
    except ConsumerProtocolError:
        return 0


class GroupMigration:
    """Upgrade, downgrade, and the classic protocol's requests to consumer groups."""

    def __init__(self, config: GroupConfig, classic_groups: dict[str, ClassicGroup], classic: ClassicGroupManager,
                 consumer: ConsumerGroupManager, topics: Callable[[], Topics],
                 group_records: Callable[[str], list[Record]]) -> None:
        """``group_records``: the records that bring __consumer_offsets up to a consumer group's
        state (all of a new group's; tombstones for one that is gone)."""
        self.config = config
        self.policy = MigrationPolicy.parse(config.consumer_migration_policy)
        self.classic_groups = classic_groups
        self.classic = classic
        self.consumer = consumer
        self.topics = topics
        self.group_records = group_records

    # ------------------------------------------------------------------ upgrade

    def maybe_upgrade(self, now: int, req: HeartbeatRequest, topics: Topics) -> CoordinatorResult:
        """Before a ConsumerGroupHeartbeat: a join into a classic group with members converts it
        when the policy allows (the records of the conversion are returned), else the heartbeat
        gets GROUP_ID_NOT_FOUND (HeartbeatError), as Kafka answers."""
        group_id = req.group_id
        classic = self.classic_groups.get(group_id)
        if classic is None or group_id in self.consumer.groups or is_empty_classic(classic):
            return CoordinatorResult()
        if req.member_epoch != JOIN_EPOCH:
            raise HeartbeatError(E.group_id_not_found, f"Group {group_id} is not a consumer group.")
        why = self._upgrade_refusal(classic)
        if why is not None:
            log.info("cannot upgrade classic group %s to a consumer group: %s", group_id, why)
            raise HeartbeatError(E.group_id_not_found,
                                 f"Cannot upgrade classic group {group_id} to consumer group: {why}.")
        return self.convert_to_consumer_group(now, classic, topics)

    def _upgrade_refusal(self, classic: ClassicGroup) -> str | None:
        """Kafka's validateOnlineUpgrade: None when the group may be upgraded, else why not."""
        if not self.policy.upgrade_enabled:
            return "online upgrade is disabled (group.consumer.migration.policy)"
        if classic.protocol_type != PROTOCOL_TYPE:
            return "the group does not use the consumer embedded protocol"
        if classic.size > self.config.consumer_max_size:
            return "the group size exceeds the consumer group maximum size"
        return None

    def convert_to_consumer_group(self, now: int, classic: ClassicGroup, topics: Topics) -> CoordinatorResult:
        """Kafka's convertToConsumerGroup + ConsumerGroup.fromClassicGroup."""
        res = CoordinatorResult()
        group_id = classic.group_id
        generation = classic.generation_id
        group = ConsumerGroup(group_id, group_epoch=generation, target_epoch=generation)
        clients = self.consumer.clients.setdefault(group_id, {})
        try:
            for m in classic.members.values():
                subscription = decode_subscription(m.metadata_for(classic.protocol_name) or
                                                   (m.protocols[0][1] if m.protocols else b""))
                assigned = to_topic_ids(decode_assignment(m.assignment), topics)
                member = ConsumerGroupMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    subscribed_topic_names=frozenset(subscription.topics),
                    # Stable at the classic generation with its last assignment: a member that was
                    # mid-rebalance is told to rejoin by its next heartbeat (the epoch moves on).
                    assignment=MemberAssignment(generation, generation, MemberState.STABLE, assigned, {}),
                    session_deadline=now + m.session_timeout_ms,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
                group.members[m.member_id] = member
                if m.group_instance_id is not None:
                    group.static_members[m.group_instance_id] = m.member_id
                group.target[m.member_id] = assigned
                for topic, parts in assigned.items():
                    for p in parts:
                        group.partition_epochs[(topic, p)] = generation
                clients[m.member_id] = (m.client_id, m.client_host)
        except ConsumerProtocolError as e:
            log.warning("cannot upgrade classic group %s: its consumer protocol metadata is malformed (%s)",
                        group_id, e)
            raise HeartbeatError(E.group_id_not_found, f"Cannot upgrade classic group {group_id} to consumer "
                                 "group because the embedded consumer protocol is malformed.") from None
        # Parked JoinGroup/SyncGroup requests: the members rejoin, now into the consumer group.
        for m in classic.members.values():
            res.reply(m.awaiting_join, JoinGroupResult(E.rebalance_in_progress, m.member_id))
            res.reply(m.awaiting_sync, SyncGroupResult(E.rebalance_in_progress))
            self.classic.timers.cancel(heartbeat_key(group_id, m.member_id))
        for pending in classic.pending_members:
            self.classic.timers.cancel(pending_member_key(group_id, pending))
        self.classic.timers.cancel(join_key(group_id))
        self.classic.timers.cancel(sync_key(group_id, generation))
        self.classic.join_ops.pop(group_id, None)
        _keep_offsets_only(classic, now)
        self.consumer.groups[group_id] = group
        for member_id in group.members:
            self.consumer.schedule(group_id, member_id, group)
        log.info("upgraded classic group %s (generation %d, %d members) to a consumer group", group_id,
                 generation, len(group.members))
        # The classic group's metadata goes; the consumer group's records come in its place.
        res.records.append(group_tombstone(group_id))
        res.records.extend(self.group_records(group_id))
        return res

    # ------------------------------------------------------------------ downgrade

    def after_consumer_member_left(self, now: int, group_id: str) -> CoordinatorResult:
        """A consumer-protocol member left or was expired: when only classic members remain and the
        policy allows, the group becomes classic again (Kafka's validateOnlineDowngrade...)."""
        group = self.consumer.groups.get(group_id)
        if group is None or not group.members or not all(m.uses_classic_protocol for m in group.members.values()):
            return CoordinatorResult()
        if not self.policy.downgrade_enabled:
            log.info("cannot downgrade consumer group %s to a classic group: online downgrade is disabled "
                     "(group.consumer.migration.policy)", group_id)
            return CoordinatorResult()
        if len(group.members) > self.config.max_size:
            log.info("cannot downgrade consumer group %s to a classic group: its size is greater than "
                     "group.max.size", group_id)
            return CoordinatorResult()
        return self.convert_to_classic_group(now, group)

    def convert_to_classic_group(self, now: int, group: ConsumerGroup) -> CoordinatorResult:
        """Kafka's convertToClassicGroup + ClassicGroup.fromConsumerGroup, then a rebalance."""
        res = CoordinatorResult()
        group_id = group.group_id
        topics = self.topics()
        classic = self.classic_groups.get(group_id)
        if classic is None:
            classic = self.classic_groups[group_id] = ClassicGroup(group_id)
        clients = self.consumer.clients.pop(group_id, {})
        classic.members = {}
        classic.static_members = {}
        classic.pending_members.clear()
        classic.pending_sync_members.clear()
        classic.protocol_type = PROTOCOL_TYPE
        classic.generation_id = group.group_epoch
        for m in group.members.values():
            assert m.classic is not None
            client_id, client_host = clients.get(m.member_id, ("", ""))
            assignment = encode_assignment(to_topic_names(m.assignment.assigned, topics), _assignment_version(m))
            classic.members[m.member_id] = Member(
                m.member_id, m.instance_id, client_id, client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, PROTOCOL_TYPE, list(m.classic.protocols), assignment=assignment)
            if m.instance_id is not None:
                classic.static_members[m.instance_id] = m.member_id
            self.consumer.timers.cancel((MEMBER_TIMER, group_id, m.member_id))
        classic.leader_id = next(iter(classic.members))
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        classic.state = GroupState.STABLE  # as loaded: Stable with its members, then a rebalance
        classic.state_timestamp = now
        del self.consumer.groups[group_id]
        for member in classic.members.values():
            self.classic.reschedule_heartbeat(now, classic, member)
        log.info("downgraded consumer group %s (epoch %d, %d members) to a classic group", group_id,
                 group.group_epoch, classic.size)
        res.records.extend(self.group_records(group_id))  # the consumer group's tombstones
        res.records.append(group_metadata_record(classic))
        self.classic.prepare_rebalance(now, classic, res, f"downgrade of group {group_id} from consumer to classic")
        return res

    # ------------------------------------------------------------------ classic requests to a consumer group

    def join_group(self, now: int, token: Token, req: JoinGroupRequestData) -> CoordinatorResult:
        """Kafka's classicGroupJoinToConsumerGroup."""
        res = CoordinatorResult()
        group = self.consumer.groups[req.group_id]
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            res.reply(token, JoinGroupResult(E.invalid_session_timeout, req.member_id))
            return res
        if not self._supports(group, req.protocol_type, req.protocols):
            res.reply(token, JoinGroupResult(E.inconsistent_group_protocol, req.member_id))
            return res
        member_id = req.member_id or str(uuid.uuid4())
        known = group.members.get(req.member_id) if req.member_id else None
        if known is None and req.group_instance_id is None and len(group.members) >= self.config.consumer_max_size:
            res.reply(token, JoinGroupResult(E.group_max_size_reached, req.member_id))
            return res
        if not req.member_id and req.require_known_member_id and req.group_instance_id is None:
            # KIP-394 as in a classic group: the id first; the member joins again with it.
            res.reply(token, JoinGroupResult(E.member_id_required, member_id))
            return res
        if known is not None and not known.uses_classic_protocol:
            res.reply(token, JoinGroupResult(E.unknown_member_id, req.member_id))
            return res
        if req.group_instance_id is not None:
            holder = group.static_members.get(req.group_instance_id)
            if holder is not None and holder != member_id:
                if req.member_id:
                    res.reply(token, JoinGroupResult(E.fenced_instance_id, req.member_id))
                    return res
                # A restarted static member takes its predecessor's place (the classic protocol has
                # no leave-for-now): mark the old one away so the group hands its place over.
                old = group.members[holder]
                old.assignment = replace(old.assignment, member_epoch=STATIC_LEAVE_EPOCH,
                                         previous_member_epoch=old.member_epoch)
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except ConsumerProtocolError:
            res.reply(token, JoinGroupResult(E.inconsistent_group_protocol, req.member_id))
            return res
        topics = self.topics()
        existing = group.members.get(member_id)
        heartbeat = HeartbeatRequest(
            req.group_id, member_id, JOIN_EPOCH if existing is None else existing.member_epoch,
            instance_id=req.group_instance_id, rack_id=subscription.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms, subscribed_topic_names=subscription.topics,
            # What it owns now: its subscription says (empty for an eager client, which has
            # revoked everything before it rejoins).
            owned=None if existing is None else to_topic_ids(subscription.owned_partitions, topics))
        try:
            group.heartbeat(heartbeat, topics, self.consumer.settings, now)
        except HeartbeatError as e:
            res.reply(token, JoinGroupResult(e.error, req.member_id))
            return res
        member = group.members[member_id]
        member.classic = ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols))
        member.session_deadline = now + req.session_timeout_ms
        member.revocation_deadline = now + req.rebalance_timeout_ms  # it must SyncGroup by then
        self.consumer.clients.setdefault(req.group_id, {})[member_id] = (req.client_id, req.client_host)
        self.consumer.schedule(req.group_id, member_id, group)
        # No leader: the broker assigns, so no member runs its client-side assignor.
        res.reply(token, JoinGroupResult(E.none, member_id, member.member_epoch, PROTOCOL_TYPE,
                                         req.protocols[0][0], ""))
        return res

    def _supports(self, group: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's supportsClassicProtocols: a protocol every classic member supports."""
        if protocol_type != PROTOCOL_TYPE or not protocols:
            return False
        classic = [m.classic for m in group.members.values() if m.classic is not None]
        if not classic:
            return True
        return any(all(any(n == name for n, _ in c.protocols) for c in classic) for name, _ in protocols)

    def sync_group(self, now: int, token: Token, req: SyncGroupRequestData) -> CoordinatorResult:
        """Kafka's classicGroupSyncToConsumerGroup: the member's assigned partitions."""
        res = CoordinatorResult()
        group = self.consumer.groups[req.group_id]
        member, error = self._classic_member(group, req.member_id, req.group_instance_id)
        if member is None or member.classic is None:
            res.reply(token, SyncGroupResult(error))
            return res
        if req.generation_id != member.member_epoch:
            res.reply(token, SyncGroupResult(E.illegal_generation))
            return res
        protocol = member.classic.protocols[0][0] if member.classic.protocols else None
        if (req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE) or \
                (req.protocol_name is not None and req.protocol_name != protocol):
            res.reply(token, SyncGroupResult(E.inconsistent_group_protocol))
            return res
        if group.group_epoch > member.member_epoch and member.assignment.state is not MemberState.UNREVOKED_PARTITIONS:
            # A newer epoch: rejoin first (one that must revoke first syncs, revokes, then rejoins).
            self._must_rejoin(now, req.group_id, member, group)
            res.reply(token, SyncGroupResult(E.rebalance_in_progress))
            return res
        member.revocation_deadline = None
        member.session_deadline = now + member.classic.session_timeout_ms
        self.consumer.schedule(req.group_id, member.member_id, group)
        assignment = encode_assignment(to_topic_names(member.assignment.assigned, self.topics()),
                                       _assignment_version(member))
        res.reply(token, SyncGroupResult(E.none, req.protocol_type, req.protocol_name, assignment))
        return res

    def heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int) -> E:
        """Kafka's classicGroupHeartbeatToConsumerGroup."""
        group = self.consumer.groups[group_id]
        member, error = self._classic_member(group, member_id, instance_id)
        if member is None or member.classic is None:
            return error
        if generation != member.member_epoch:
            return E.illegal_generation
        member.session_deadline = now + member.classic.session_timeout_ms
        state = member.assignment.state
        if member.member_epoch < group.group_epoch or state is MemberState.UNREVOKED_PARTITIONS or (
                state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member)):
            # It rejoins to catch up with the epoch, to finish revoking, or to take partitions
            # that have been freed meanwhile.
            self._must_rejoin(now, group_id, member, group)
            return E.rebalance_in_progress
        self.consumer.schedule(group_id, member.member_id, group)
        return E.none

    def leave_group(self, now: int, token: Token, group_id: str, leaving: list[MemberIdentity]) -> CoordinatorResult:
        """Kafka's classicGroupLeaveToConsumerGroup: only members that use the classic protocol."""
        res = CoordinatorResult()
        group = self.consumer.groups[group_id]
        results: list[tuple[MemberIdentity, E]] = []
        for m in leaving:
            if m.group_instance_id is None:
                member = group.members.get(m.member_id)
                error = E.unknown_member_id if member is None or member.classic is None else E.none
            else:
                member, error = self._classic_member(group, m.member_id, m.group_instance_id,
                                                     allow_no_member_id=True)
            if member is not None and error is E.none:
                log.info("member %s has left consumer group %s (reason: %s)", member.member_id, group_id,
                         m.reason or "none given")
                group.remove_member(member.member_id)
                self.consumer.forget(group_id, member.member_id)
            results.append((m, error))
        res.reply(token, LeaveGroupResult(E.none, tuple(results)))
        return res

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        allow_no_member_id: bool = False) -> tuple[ConsumerGroupMember | None, E]:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            holder = group.static_members.get(instance_id)
            member = group.members.get(holder) if holder is not None else None
            if member is not None and member.member_id != member_id and not (allow_no_member_id and not member_id):
                return None, E.fenced_instance_id
        if member is None or member.classic is None:
            return None, E.unknown_member_id
        return member, E.none

    def _must_rejoin(self, now: int, group_id: str, member: ConsumerGroupMember, group: ConsumerGroup) -> None:
        if member.revocation_deadline is None:  # the join timeout, if not already running
            member.revocation_deadline = now + max(member.rebalance_timeout_ms, 0)
        self.consumer.schedule(group_id, member.member_id, group)


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Some partition of the member's target is still held by another member."""
    assigned = member.assignment.assigned
    for topic, parts in group.target.get(member.member_id, {}).items():
        for p in parts - assigned.get(topic, frozenset()):
            if group.partition_epochs.get((topic, p), -1) != -1:
                return True
    return False


def _keep_offsets_only(classic: ClassicGroup, now: int) -> None:
    """The classic group object stays only as the holder of the group's committed offsets."""
    classic.members = {}
    classic.static_members = {}
    classic.pending_members.clear()
    classic.pending_sync_members.clear()
    classic.leader_id = None
    classic.protocol_name = None
    classic.subscribed_topics = None
    classic.state = GroupState.EMPTY
    classic.state_timestamp = now
