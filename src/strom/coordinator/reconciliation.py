"""How a consumer-protocol member moves from the partitions it has to the group's target (KIP-848;
Kafka's CurrentAssignmentBuilder), and which member epochs a heartbeat or commit may carry.

The group computes a target assignment per group epoch (the server-side assignor's answer). A
member does not jump to it: a partition that must move is first revoked by its current owner, and
only once that owner has let it go (its heartbeat no longer lists it) is it handed to the new one.
Partitions that stay with a member are never revoked or paused on the way. Pure functions over
immutable values: the group (coordinator/consumer_group.py) keeps the state and the records.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}

# The epochs a ConsumerGroupHeartbeat carries besides a member's own.
JOIN_EPOCH = 0  # a new member, or one that rejoins after being fenced
LEAVE_EPOCH = -1  # a dynamic member leaves
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now: its instance id keeps its assignment


class MemberState(enum.Enum):
    """Kafka's MemberState: where a member is on its way to the target assignment."""

    STABLE = "stable"  # it has its target (or all of it that is free)
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # it must first give up partitions
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # partitions of its target are still another's
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """A member's side of the reconciliation, as the group keeps it (and writes it to
    __consumer_offsets as ConsumerGroupCurrentMemberAssignment)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)  # partitions it owns and may fetch
    pending_revocation: Assignment = field(default_factory=dict)  # partitions it must give up


class FencedMemberEpoch(Exception):
    """FENCED_MEMBER_EPOCH: the member must rejoin with epoch 0."""


class StaleMemberEpoch(Exception):
    """STALE_MEMBER_EPOCH: a commit from an epoch the member has left."""


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still owns any of ``partitions`` by its own account (``owned``, the
    partitions its heartbeat listed). A heartbeat that lists none (None) is taken as owning all."""
    if owned is None:
        return any(partitions.values())
    return any(owned.get(topic, frozenset()) & parts for topic, parts in partitions.items())


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return True
    return all(parts <= assigned.get(topic, frozenset()) for topic, parts in owned.items())


def check_heartbeat_epoch(member: MemberAssignment, received_epoch: int, owned: Assignment | None) -> None:
    """A heartbeat with a member epoch other than the member's is fenced, except one with the
    previous epoch from a member that owns no more than it is assigned: it missed the answer that
    moved it forward, which the coordinator then sends again (Kafka's throwIfMemberEpochIsInvalid)."""
    if received_epoch > member.member_epoch:
        raise FencedMemberEpoch(f"member epoch {received_epoch} is newer than the group's {member.member_epoch}")
    if received_epoch < member.member_epoch and (
            received_epoch != member.previous_member_epoch or not is_subset(owned, member.assigned)):
        raise FencedMemberEpoch(f"member epoch {received_epoch} is older than the group's {member.member_epoch}")


def check_commit_epoch(member: MemberAssignment, received_epoch: int) -> None:
    """OffsetCommit (v9+) from a consumer-protocol member: only at its current epoch."""
    if received_epoch != member.member_epoch:
        raise StaleMemberEpoch(f"commit at member epoch {received_epoch}, the member is at {member.member_epoch}")


def reconcile(member: MemberAssignment, target_epoch: int, target: Assignment, owned: Assignment | None,
              owner_epoch: Callable[[uuid.UUID, int], int]) -> MemberAssignment:
    """The member's next step towards ``target`` (its share of the group's target assignment at
    ``target_epoch``). ``owned`` is what its heartbeat says it owns (None: not said).
    ``owner_epoch(topic, partition)`` is the epoch of the member holding a partition now (assigned
    or pending revocation), -1 when nobody does: only such a free partition may be handed over."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owned, owner_epoch)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member  # wait: it has not let them go yet
        # Revoked: one epoch on (not straight to the target: the target may have moved meanwhile).
        return _next(member, min(member.member_epoch + 1, target_epoch), target_epoch, target, owned, owner_epoch)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owned, owner_epoch)
    raise ValueError(f"member in state {member.state}")


def _next(member: MemberAssignment, epoch_if_revoking: int, target_epoch: int, target: Assignment,
          owned: Assignment | None, owner_epoch: Callable[[uuid.UUID, int], int]) -> MemberAssignment:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    gain: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic, frozenset())
        have = member.assigned.get(topic, frozenset())
        if kept := have & wanted:
            keep[topic] = kept
        if gone := have - wanted:
            revoke[topic] = gone
        free = frozenset(p for p in wanted - have if owner_epoch(topic, p) == -1)
        if free:
            gain[topic] = free
        if len(free) < len(wanted - have):
            unreleased = True
    if revoke and owns_any(owned, revoke):
        # First the revocation, at the same epoch; nothing new until it is done.
        return MemberAssignment(epoch_if_revoking, _previous(member, epoch_if_revoking),
                                MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    assigned = dict(keep)
    for topic, parts in gain.items():
        assigned[topic] = assigned.get(topic, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return MemberAssignment(target_epoch, _previous(member, target_epoch), state, assigned, {})


def _previous(member: MemberAssignment, new_epoch: int) -> int:
    """The epoch a heartbeat may still carry after this step: the member's until now when the step
    moves it on (its answer may be lost), else the one it already had."""
    return member.member_epoch if new_epoch != member.member_epoch else member.previous_member_epoch
