"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Follows Kafka's GroupCoordinator (the classic-group half of its GroupMetadataManager) closely:
the same states, checks, error codes and delayed operations, with time passed in. Delayed
operations are deadlines in a TimerQueue; requests that must wait (a JoinGroup until the rebalance
completes, a follower's SyncGroup until the leader's assignment) are parked as tokens on the member
and answered through the CoordinatorResult of whatever operation completes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom.coordinator import records as rec
from strom.coordinator.api import (
    JoinGroupMember,
    JoinGroupRequestData,
    JoinGroupResult,
    LeaveGroupResult,
    MemberIdentity,
    SyncGroupRequestData,
    SyncGroupResult,
)
from strom.coordinator.config import GroupConfig
from strom.coordinator.group import ClassicGroup, GroupState, Member, Token
from strom.coordinator.result import CoordinatorResult, Record
from strom.coordinator.timers import TimerQueue
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.coordinator")

S = GroupState


@dataclass(frozen=True, slots=True)
class DelayedJoin:
    """The pending completion of a PreparingRebalance phase.

    ``initial``: Kafka's InitialDelayedJoin, used when an Empty group starts rebalancing; it never
    completes early, and each expiry that saw a new member arrive waits another delay, up to the
    rebalance timeout, so a group of consumers starting together forms in one rebalance.
    """

    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


def pending_member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("pending-member", group_id, member_id)


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str, generation: int) -> tuple[str, str, int]:
    return ("sync", group_id, generation)


def group_metadata_record(group: ClassicGroup) -> Record:
    value = rec.GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp,
        members=tuple(
            rec.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata_for(group.protocol_name), m.assignment)
            for m in group.members.values()
        ),
    )
    key = rec.encode_group_metadata_key(rec.GroupMetadataKey(group.group_id))
    return Record(group.group_id, key, rec.encode_group_metadata_value(value))


def group_tombstone(group_id: str) -> Record:
    return Record(group_id, rec.encode_group_metadata_key(rec.GroupMetadataKey(group_id)), None)


class ClassicGroupManager:
    def __init__(self, config: GroupConfig, groups: dict[str, ClassicGroup], timers: TimerQueue) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers
        self.join_ops: dict[str, DelayedJoin] = {}

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, now: int, token: Token, req: JoinGroupRequestData) -> CoordinatorResult:
        res = CoordinatorResult()
        cfg = self.config
        if not req.group_id:
            res.reply(token, JoinGroupResult(E.invalid_group_id, req.member_id))
            return res
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            res.reply(token, JoinGroupResult(E.invalid_session_timeout, req.member_id))
            return res
        is_unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                res.reply(token, JoinGroupResult(E.unknown_member_id, req.member_id))
                return res
            group = ClassicGroup(req.group_id, state_timestamp=now)
            self.groups[req.group_id] = group

        if not self._accept_joining_member(group, req.member_id):
            self._remove_member_entirely(group, req.member_id, res)
            res.reply(token, JoinGroupResult(E.group_max_size_reached))
        elif is_unknown:
            self._new_member_join(now, group, token, req, res)
        else:
            self._current_member_join(now, group, token, req, res)

        if group.is_in(S.PREPARING_REBALANCE):
            res.merge(self.try_complete_join(now, group))
        self.drop_if_unused(group)
        return res

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            # Counting members that have rejoined lets the last ones of an oversized group be refused.
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or \
                group.num_awaiting_join() < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def _new_member_join(self, now: int, group: ClassicGroup, token: Token, req: JoinGroupRequestData,
                         res: CoordinatorResult) -> None:
        if group.is_in(S.DEAD):
            res.reply(token, JoinGroupResult(E.coordinator_not_available))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            res.reply(token, JoinGroupResult(E.inconsistent_group_protocol))
            return
        new_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                self._update_static_member_and_rebalance(now, group, old_id, new_id, token, req, res)
            else:
                self._add_member_and_rebalance(now, group, new_id, token, req, res)
        elif req.require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries the JoinGroup
            # comes back with the same id instead of leaving a ghost member behind.
            group.pending_members.add(new_id)
            self.timers.schedule(pending_member_key(group.group_id, new_id), now + req.session_timeout_ms)
            res.reply(token, JoinGroupResult(E.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(now, group, new_id, token, req, res)

    def _current_member_join(self, now: int, group: ClassicGroup, token: Token, req: JoinGroupRequestData,
                             res: CoordinatorResult) -> None:
        member_id = req.member_id
        if group.is_in(S.DEAD):
            res.reply(token, JoinGroupResult(E.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            res.reply(token, JoinGroupResult(E.inconsistent_group_protocol, member_id))
            return
        if member_id in group.pending_members:
            self.timers.cancel(pending_member_key(group.group_id, member_id))
            self._add_member_and_rebalance(now, group, member_id, token, req, res)
            return
        error = validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            res.reply(token, JoinGroupResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(now, group, member, token, req, res)
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It probably missed the JoinGroup response: answer again for this generation.
                res.reply(token, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(now, group, member, token, req, res)
        elif group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A leader's rejoin is how clients ask for a rebalance (e.g. new partitions); changed
                # metadata (new subscription, cooperative owned partitions) needs one too.
                self._update_member_and_rebalance(now, group, member, token, req, res)
            else:
                res.reply(token, self._join_result(group, member, with_members=False))
        else:  # Empty: the member's generation is gone; it must rejoin from scratch.
            res.reply(token, JoinGroupResult(E.unknown_member_id, member_id))

    def _join_result(self, group: ClassicGroup, member: Member, with_members: bool = True) -> JoinGroupResult:
        members: tuple[JoinGroupMember, ...] = ()
        if with_members and group.is_leader(member.member_id):
            members = tuple(JoinGroupMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                            for m in group.members.values())
        return JoinGroupResult(E.none, member.member_id, group.generation_id, group.protocol_type,
                               group.protocol_name, group.leader_id or "", members)

    def _park_join(self, member: Member, token: Token, res: CoordinatorResult) -> None:
        if member.awaiting_join is not None and member.awaiting_join is not token:
            # A second JoinGroup supersedes the first; don't leave the first one hanging.
            res.reply(member.awaiting_join, JoinGroupResult(E.rebalance_in_progress, member.member_id))
        member.awaiting_join = token

    def _add_member_and_rebalance(self, now: int, group: ClassicGroup, member_id: str, token: Token,
                                  req: JoinGroupRequestData, res: CoordinatorResult) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, list(req.protocols), awaiting_join=token,
                        is_new=True)
        if group.is_in(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self.timers.schedule(heartbeat_key(group.group_id, member_id), now + self.config.new_member_join_timeout_ms)
        self.maybe_prepare_rebalance(now, group, res, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, now: int, group: ClassicGroup, member: Member, token: Token,
                                     req: JoinGroupRequestData, res: CoordinatorResult) -> None:
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._park_join(member, token, res)
        self.maybe_prepare_rebalance(now, group, res, f"member {member.member_id} rejoining")

    def _update_static_member_and_rebalance(self, now: int, group: ClassicGroup, old_id: str, new_id: str,
                                            token: Token, req: JoinGroupRequestData,
                                            res: CoordinatorResult) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id or ""
        member, old_join, old_sync = group.replace_static_member(instance_id, old_id, new_id)
        # The old incarnation's parked requests are fenced: a newer process owns the instance id.
        res.reply(old_join, JoinGroupResult(E.fenced_instance_id, old_id))
        res.reply(old_sync, SyncGroupResult(E.fenced_instance_id))
        self.timers.cancel(heartbeat_key(group.group_id, old_id))
        self.reschedule_heartbeat(now, group, member)
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = token

        if group.is_in(S.STABLE):
            if group.protocol_name == group.select_protocol():
                # KIP-345: a restarted static member takes its old place and assignment with no
                # rebalance. The old leader id is returned so the member does not think it must
                # compute an assignment that a stable group would never distribute.
                log.info("static member %s of group %s rejoined as %s without a rebalance",
                         instance_id, group.group_id, new_id)
                member.awaiting_join = None
                res.records.append(group_metadata_record(group))
                res.reply(token, JoinGroupResult(E.none, new_id, group.generation_id, group.protocol_type,
                                                 group.protocol_name, current_leader))

                def undo(now_ms: int, error: int) -> CoordinatorResult:
                    out = CoordinatorResult()
                    if group.static_member_id(instance_id) == new_id:
                        restored, _, _ = group.replace_static_member(instance_id, new_id, old_id)
                        restored.protocols, restored.rebalance_timeout_ms, restored.session_timeout_ms = saved
                        self.timers.cancel(heartbeat_key(group.group_id, new_id))
                        self.reschedule_heartbeat(now_ms, group, restored)
                    out.reply(token, JoinGroupResult(E(error)))
                    return out

                res.on_failure = undo
            else:
                self.maybe_prepare_rebalance(now, group, res, f"static member {instance_id} changed protocols")
        elif group.is_in(S.COMPLETING_REBALANCE):
            # The leader may be assigning to the old member id: rebalance so the new id gets a share.
            self.prepare_rebalance(now, group, res, f"static member {instance_id} rejoined during CompletingRebalance")
        elif not group.is_in(S.PREPARING_REBALANCE):
            member.awaiting_join = None
            res.reply(token, JoinGroupResult(E.unknown_member_id, new_id))

    # ------------------------------------------------------------------ rebalance phases

    def maybe_prepare_rebalance(self, now: int, group: ClassicGroup, res: CoordinatorResult, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(now, group, res, reason)

    def prepare_rebalance(self, now: int, group: ClassicGroup, res: CoordinatorResult, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(now, group, E.rebalance_in_progress, res)
        self.timers.cancel(sync_key(group.group_id, group.generation_id))
        gid = group.group_id
        if group.is_in(S.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.join_ops[gid] = DelayedJoin(True, delay, remaining)
            self.timers.schedule(join_key(gid), now + delay)
        else:
            self.join_ops[gid] = DelayedJoin(False)
            self.timers.schedule(join_key(gid), now + group.rebalance_timeout_ms())
        group.transition_to(S.PREPARING_REBALANCE, now)
        log.info("preparing to rebalance group %s in state PreparingRebalance with old generation %d (reason: %s)",
                 gid, group.generation_id, reason)
        res.merge(self.try_complete_join(now, group))

    def try_complete_join(self, now: int, group: ClassicGroup) -> CoordinatorResult:
        op = self.join_ops.get(group.group_id)
        if group.is_in(S.PREPARING_REBALANCE) and op is not None and not op.initial \
                and group.has_all_members_joined():
            return self.complete_join(now, group)
        return CoordinatorResult()

    def on_join_expired(self, now: int, group: ClassicGroup) -> CoordinatorResult:
        op = self.join_ops.get(group.group_id)
        if op is None or not group.is_in(S.PREPARING_REBALANCE):
            return CoordinatorResult()
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, op.remaining_ms)
            remaining = max(op.remaining_ms - op.delay_ms, 0)
            self.join_ops[group.group_id] = DelayedJoin(True, delay, remaining)
            self.timers.schedule(join_key(group.group_id), now + delay)
            return CoordinatorResult()
        return self.complete_join(now, group)

    def complete_join(self, now: int, group: ClassicGroup) -> CoordinatorResult:
        res = CoordinatorResult()
        gid = group.group_id
        self.join_ops.pop(gid, None)
        self.timers.cancel(join_key(gid))
        for m in [m for m in group.not_yet_rejoined() if not m.is_static]:
            log.info("group %s removed dynamic member %s which did not rejoin", gid, m.member_id)
            self._remove_member_entirely(group, m.member_id, res)
        if group.is_in(S.DEAD):
            return res
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined remain: wait for them, or for their
            # session timeouts to remove them.
            log.warning("group %s could not complete rebalance because no members rejoined", gid)
            self.join_ops[gid] = DelayedJoin(False)
            self.timers.schedule(join_key(gid), now + group.rebalance_timeout_ms())
            return res
        group.init_next_generation(now)
        if group.is_in(S.EMPTY):
            log.info("group %s with generation %d is now empty", gid, group.generation_id)
            res.records.append(group_metadata_record(group))
            return res
        log.info("stabilized group %s generation %d (protocol %s) with %d members", gid, group.generation_id,
                 group.protocol_name, group.size)
        for member in group.members.values():
            res.reply(member.awaiting_join, self._join_result(group, member))
            member.awaiting_join = None
            member.is_new = False
            self.reschedule_heartbeat(now, group, member)
            group.pending_sync_members.add(member.member_id)
        self.timers.schedule(sync_key(gid, group.generation_id), now + group.rebalance_timeout_ms())
        return res

    def on_sync_expired(self, now: int, group: ClassicGroup, generation: int) -> CoordinatorResult:
        res = CoordinatorResult()
        if generation != group.generation_id or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return res
        if group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            log.info("group %s removed members which did not send SyncGroup: %s", group.group_id, missing)
            for member_id in missing:
                self._remove_member_entirely(group, member_id, res)
            self.prepare_rebalance(now, group, res, "members did not sync in time")
        return res

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(self, now: int, token: Token, req: SyncGroupRequestData) -> CoordinatorResult:
        res = CoordinatorResult()
        group = self.groups.get(req.group_id)
        error = self._sync_precheck(group, req)
        if error is not None or group is None:
            res.reply(token, SyncGroupResult(error or E.unknown_member_id))
            return res
        member = group.members[req.member_id]
        if group.is_in(S.EMPTY):
            res.reply(token, SyncGroupResult(E.unknown_member_id))
        elif group.is_in(S.PREPARING_REBALANCE):
            res.reply(token, SyncGroupResult(E.rebalance_in_progress))
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.awaiting_sync is not None and member.awaiting_sync is not token:
                res.reply(member.awaiting_sync, SyncGroupResult(E.rebalance_in_progress))
            member.awaiting_sync = token
            group.pending_sync_members.discard(req.member_id)
            if group.is_leader(req.member_id):
                self._complete_sync(now, group, req.assignments, res)
        else:  # Stable: a member that missed the answer asks again
            group.pending_sync_members.discard(req.member_id)
            res.reply(token, SyncGroupResult(E.none, group.protocol_type, group.protocol_name, member.assignment))
            self.reschedule_heartbeat(now, group, member)
        return res

    def _sync_precheck(self, group: ClassicGroup | None, req: SyncGroupRequestData) -> E | None:
        if group is None:
            return E.unknown_member_id
        if group.is_in(S.DEAD):
            return E.coordinator_not_available
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return E.fenced_instance_id
        if not group.has(req.member_id):
            return E.unknown_member_id
        if req.generation_id != group.generation_id:
            return E.illegal_generation
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return E.inconsistent_group_protocol
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return E.inconsistent_group_protocol
        return None

    def _complete_sync(self, now: int, group: ClassicGroup, assignments: dict[str, bytes],
                       res: CoordinatorResult) -> None:
        """The leader's assignment: persist it, answer every parked SyncGroup, become Stable."""
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            log.warning("group %s generation %d: empty assignment for members %s", group.group_id,
                        group.generation_id, missing)
        for mid, m in group.members.items():
            m.assignment = assignments.get(mid, b"")
        res.records.append(group_metadata_record(group))
        answered = [m.awaiting_sync for m in group.members.values() if m.awaiting_sync is not None]
        self._propagate_assignment(now, group, E.none, res)
        group.transition_to(S.STABLE, now)
        generation = group.generation_id
        log.info("group %s generation %d is stable", group.group_id, generation)

        def undo(now_ms: int, error: int) -> CoordinatorResult:
            out = CoordinatorResult()
            for t in answered:
                out.reply(t, SyncGroupResult(E(error)))
            if group.is_in(S.STABLE) and group.generation_id == generation:
                for m in group.members.values():
                    m.assignment = b""
                self.maybe_prepare_rebalance(now_ms, group, out, "failed to store the group assignment")
            return out

        res.on_failure = undo

    def _propagate_assignment(self, now: int, group: ClassicGroup, error: E, res: CoordinatorResult) -> None:
        for member in group.members.values():
            if member.awaiting_sync is not None:
                assignment = member.assignment if error is E.none else b""
                res.reply(member.awaiting_sync,
                          SyncGroupResult(error, group.protocol_type, group.protocol_name, assignment))
                member.awaiting_sync = None
                # A member that waited for its assignment did not heartbeat meanwhile: restart its clock.
                self.reschedule_heartbeat(now, group, member)

    def _reset_and_propagate_assignment_error(self, now: int, group: ClassicGroup, error: E,
                                              res: CoordinatorResult) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(now, group, error, res)

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int) -> E:
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_in(S.DEAD):
            return E.coordinator_not_available
        if group.is_static_member_fenced(member_id, instance_id):
            return E.fenced_instance_id
        if not group.has(member_id):
            return E.unknown_member_id
        if generation != group.generation_id:
            return E.illegal_generation
        if group.is_in(S.EMPTY):
            return E.unknown_member_id
        self.reschedule_heartbeat(now, group, group.members[member_id])
        # During PreparingRebalance the heartbeat answer is how members learn they must rejoin.
        return E.rebalance_in_progress if group.is_in(S.PREPARING_REBALANCE) else E.none

    def reschedule_heartbeat(self, now: int, group: ClassicGroup, member: Member) -> None:
        self.timers.schedule(heartbeat_key(group.group_id, member.member_id), now + member.session_timeout_ms)

    def on_heartbeat_expired(self, now: int, group: ClassicGroup, member_id: str) -> CoordinatorResult:
        res = CoordinatorResult()
        member = group.members.get(member_id)
        if member is None or group.is_in(S.DEAD):
            return res
        if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
            # Waiting in a rebalance counts as alive; the clock restarts when the wait ends.
            return res
        log.info("member %s in group %s has failed (session timeout), removing it", member_id, group.group_id)
        self.remove_member_and_update_group(now, group, member, res, "session timeout")
        return res

    def on_pending_member_expired(self, now: int, group: ClassicGroup, member_id: str) -> CoordinatorResult:
        res = CoordinatorResult()
        if member_id in group.pending_members:
            log.info("pending member %s of group %s expired before rejoining", member_id, group.group_id)
            self.remove_pending_member(now, group, member_id, res)
        return res

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(self, now: int, token: Token, group_id: str,
                    leaving: list[MemberIdentity]) -> CoordinatorResult:
        res = CoordinatorResult()
        if not group_id:
            res.reply(token, LeaveGroupResult(E.invalid_group_id))
            return res
        group = self.groups.get(group_id)
        if group is None:
            res.reply(token, LeaveGroupResult(E.none, tuple((m, E.unknown_member_id) for m in leaving)))
            return res
        if group.is_in(S.DEAD):
            res.reply(token, LeaveGroupResult(E.coordinator_not_available))
            return res
        results: list[tuple[MemberIdentity, E]] = []
        for m in leaving:
            error = E.none
            if m.member_id == "":
                # Administrative removal of a static member by its instance id (KIP-345).
                current = group.static_member_id(m.group_instance_id)
                if current is None:
                    error = E.unknown_member_id
                else:
                    self._remove_current_member(now, group, current, res, m.reason)
            elif m.member_id in group.pending_members:
                self.remove_pending_member(now, group, m.member_id, res)
            else:
                found = validate_current_member(group, m.member_id, m.group_instance_id)
                if found is None:
                    self._remove_current_member(now, group, m.member_id, res, m.reason)
                else:
                    error = found
            results.append((m, error))
        res.reply(token, LeaveGroupResult(E.none, tuple(results)))
        self.drop_if_unused(group)
        return res

    def _remove_current_member(self, now: int, group: ClassicGroup, member_id: str, res: CoordinatorResult,
                               reason: str | None) -> None:
        log.info("member %s has left group %s (reason: %s)", member_id, group.group_id, reason or "none given")
        self.remove_member_and_update_group(now, group, group.members[member_id], res, "member left")

    # ------------------------------------------------------------------ removal

    def _remove_member_entirely(self, group: ClassicGroup, member_id: str, res: CoordinatorResult) -> None:
        member = group.members.get(member_id)
        if member is not None:
            # A parked request of a removed member gets UNKNOWN_MEMBER_ID: the client rejoins if alive.
            res.reply(member.awaiting_join, JoinGroupResult(E.unknown_member_id, ""))
            res.reply(member.awaiting_sync, SyncGroupResult(E.unknown_member_id))
            member.awaiting_join = member.awaiting_sync = None
        group.remove(member_id)
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        self.timers.cancel(pending_member_key(group.group_id, member_id))

    def remove_member_and_update_group(self, now: int, group: ClassicGroup, member: Member,
                                       res: CoordinatorResult, reason: str) -> None:
        self._remove_member_entirely(group, member.member_id, res)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(now, group, res, reason)
        elif group.is_in(S.PREPARING_REBALANCE):
            res.merge(self.try_complete_join(now, group))

    def remove_pending_member(self, now: int, group: ClassicGroup, member_id: str, res: CoordinatorResult) -> None:
        group.remove(member_id)
        self.timers.cancel(pending_member_key(group.group_id, member_id))
        if group.is_in(S.PREPARING_REBALANCE):
            res.merge(self.try_complete_join(now, group))
        self.drop_if_unused(group)

    def drop_if_unused(self, group: ClassicGroup) -> None:
        """Forget a group that never held anything (e.g. a refused first JoinGroup): nothing to persist."""
        if group.is_in(S.EMPTY) and group.generation_id == 0 and not group.members \
                and not group.pending_members and not group.offsets and group.group_id not in self.join_ops:
            self.groups.pop(group.group_id, None)

    # ------------------------------------------------------------------ loading

    def load_group(self, value: rec.GroupMetadataValue, group: ClassicGroup) -> None:
        """Install a GroupMetadataValue read from the log (at start): Empty, or Stable with its members."""
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp = value.current_state_timestamp
        group.members = {}
        group.static_members = {}
        group.pending_members.clear()
        group.pending_sync_members.clear()
        for m in value.members:
            protocols = [(value.protocol, m.subscription)] if value.protocol is not None else []
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, value.protocol_type, protocols, assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = S.STABLE if group.members else S.EMPTY
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()


def validate_current_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> E | None:
    """Is ``member_id`` (with ``instance_id`` if static) the current holder of its place in the group?"""
    current = group.static_member_id(instance_id)
    if current is not None:
        return E.fenced_instance_id if current != member_id else None
    if not group.has(member_id):
        return E.unknown_member_id
    return None
