"""A consumer-protocol member's way to its target assignment (coordinator/reconciliation.py): revoke
before assign, never pause what stays, never two owners of one partition, and the member epochs a
heartbeat or a commit may carry."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.coordinator.reconciliation import (
    Assignment,
    FencedMemberEpoch,
    MemberAssignment,
    MemberState,
    StaleMemberEpoch,
    check_commit_epoch,
    check_heartbeat_epoch,
    reconcile,
)

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
NEW = MemberAssignment(member_epoch=0, previous_member_epoch=-1)


def parts(*ps: int, topic: uuid.UUID = T) -> Assignment:
    return {topic: frozenset(ps)} if ps else {}


def free(topic: uuid.UUID, partition: int) -> int:
    return -1


def test_a_new_member_gets_its_free_target_at_the_target_epoch() -> None:
    m = reconcile(NEW, 1, {T: frozenset({0, 1}), U: frozenset({0})}, None, free)
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (1, 0, MemberState.STABLE)
    assert m.assigned == {T: frozenset({0, 1}), U: frozenset({0})} and m.pending_revocation == {}


def test_at_its_target_a_stable_member_is_left_as_it_is() -> None:
    m = reconcile(NEW, 1, parts(0, 1), None, free)
    assert reconcile(m, 1, parts(0, 1), parts(0, 1), free) is m


def test_revoke_first_keep_what_stays_then_move_on() -> None:
    m = reconcile(NEW, 1, parts(0, 1, 2), None, free)
    # Epoch 2 takes partition 2 away: the member keeps 0 and 1 (never paused) and must revoke 2,
    # at its current epoch.
    m = reconcile(m, 2, parts(0, 1), parts(0, 1, 2), free)
    assert (m.member_epoch, m.state) == (1, MemberState.UNREVOKED_PARTITIONS)
    assert m.assigned == parts(0, 1) and m.pending_revocation == parts(2)
    # Still owned by its account: it waits.
    assert reconcile(m, 2, parts(0, 1), parts(0, 1, 2), free) is m
    # No list of owned partitions: taken as still owning them.
    assert reconcile(m, 2, parts(0, 1), None, free) is m
    # Let go: the target epoch.
    m = reconcile(m, 2, parts(0, 1), parts(0, 1), free)
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (2, 1, MemberState.STABLE)
    assert m.assigned == parts(0, 1) and m.pending_revocation == {}


def test_a_member_that_already_let_go_skips_the_revoking_step() -> None:
    m = reconcile(NEW, 1, parts(0, 1), None, free)
    m = reconcile(m, 2, parts(0), parts(0), free)
    assert (m.member_epoch, m.state, m.assigned) == (2, MemberState.STABLE, parts(0))


def test_revoking_moves_one_epoch_at_a_time() -> None:
    m = reconcile(NEW, 1, parts(0, 1), None, free)
    m = reconcile(m, 2, parts(0), parts(0, 1), free)
    assert m.state is MemberState.UNREVOKED_PARTITIONS and m.member_epoch == 1
    # The target moved on to epoch 4 meanwhile, with another partition to give up: the revocation
    # of 1 is acknowledged at epoch 2, the next revocation starts there.
    m = reconcile(m, 4, parts(), parts(0), free)
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (2, 1, MemberState.UNREVOKED_PARTITIONS)
    assert m.pending_revocation == parts(0) and m.assigned == {}
    m = reconcile(m, 4, parts(), {}, free)
    assert (m.member_epoch, m.state, m.assigned) == (4, MemberState.STABLE, {})


def test_a_partition_still_held_by_another_is_given_only_once_released() -> None:
    holder = {2: 1}  # partition 2 is still held (pending revocation) by a member at epoch 1

    def owner(topic: uuid.UUID, p: int) -> int:
        return holder.get(p, -1)

    m = reconcile(NEW, 2, parts(2, 3), None, owner)
    assert (m.member_epoch, m.state, m.assigned) == (2, MemberState.UNRELEASED_PARTITIONS, parts(3))
    assert reconcile(m, 2, parts(2, 3), parts(3), owner).assigned == parts(3)
    holder.clear()
    m = reconcile(m, 2, parts(2, 3), parts(3), owner)
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (2, 0, MemberState.STABLE)
    assert m.assigned == parts(2, 3)


def test_previous_epoch_is_kept_while_the_epoch_does_not_move() -> None:
    m = reconcile(NEW, 3, parts(0, 1), None, lambda t, p: 7 if p == 1 else -1)
    assert (m.member_epoch, m.previous_member_epoch) == (3, 0)
    m = reconcile(m, 3, parts(0, 1), parts(0), lambda t, p: 7 if p == 1 else -1)
    assert (m.member_epoch, m.previous_member_epoch) == (3, 0)  # a heartbeat at 0 is still understood


def test_heartbeat_epochs() -> None:
    m = MemberAssignment(member_epoch=5, previous_member_epoch=4, assigned=parts(0, 1))
    check_heartbeat_epoch(m, 5, parts(0, 1))
    check_heartbeat_epoch(m, 5, parts(0, 1, 2))  # its own epoch: what it owns is reconciled, not fenced
    check_heartbeat_epoch(m, 4, parts(0))  # missed the answer that moved it to 5: accepted, sent again
    check_heartbeat_epoch(m, 4, None)
    with pytest.raises(FencedMemberEpoch):
        check_heartbeat_epoch(m, 6, parts(0, 1))  # from the future
    with pytest.raises(FencedMemberEpoch):
        check_heartbeat_epoch(m, 4, parts(0, 2))  # the previous epoch, owning what it no longer has
    with pytest.raises(FencedMemberEpoch):
        check_heartbeat_epoch(m, 3, parts(0))  # older than the previous one


def test_commit_epochs() -> None:
    m = MemberAssignment(member_epoch=5, previous_member_epoch=4)
    check_commit_epoch(m, 5)
    for stale in (4, 6, 0):
        with pytest.raises(StaleMemberEpoch):
            check_commit_epoch(m, stale)


# A group of members moving through random targets, each member heartbeating in turn: at every
# moment a partition is assigned to one member at most, a partition that stays with its member is
# never taken from it, and once the target holds still everyone reaches it.

def _owner_epochs(members: dict[str, MemberAssignment]) -> dict[tuple[uuid.UUID, int], int]:
    held: dict[tuple[uuid.UUID, int], int] = {}
    for m in members.values():
        for a in (m.assigned, m.pending_revocation):
            for topic, ps in a.items():
                for p in ps:
                    held[(topic, p)] = m.member_epoch
    return held


def _exclusive(members: dict[str, MemberAssignment]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for m in members.values():
        for topic, ps in m.assigned.items():
            for p in ps:
                assert (topic, p) not in seen, f"{topic}-{p} assigned twice"
                seen.add((topic, p))


targets_strategy = st.lists(
    st.lists(st.integers(min_value=0, max_value=2), min_size=6, max_size=6),  # partition -> member index
    min_size=1, max_size=5)


@settings(max_examples=150, deadline=None)
@given(targets=targets_strategy, order=st.randoms(use_true_random=False))
def test_a_group_never_assigns_a_partition_twice_and_converges(targets: list[list[int]], order) -> None:  # type: ignore[no-untyped-def]
    names = ["a", "b", "c"]
    members = {n: NEW for n in names}
    for epoch, owners in enumerate(targets, start=1):
        target = {n: {T: frozenset(p for p, o in enumerate(owners) if o == i)} for i, n in enumerate(names)}
        for _ in range(3):  # a few heartbeats per member at this target, in random order
            for n in order.sample(names, len(names)):
                before = members[n]
                held = _owner_epochs({k: v for k, v in members.items()})
                # A well-behaved client lets revoked partitions go by its next heartbeat.
                owned = {t: ps for t, ps in before.assigned.items()}
                after = reconcile(before, epoch, target[n], owned, lambda t, p, h=held: h.get((t, p), -1))
                stay = {(t, p) for t, ps in before.assigned.items() for p in ps
                        if p in target[n].get(t, frozenset())}
                assert stay <= {(t, p) for t, ps in after.assigned.items() for p in ps}, "a staying partition paused"
                members[n] = after
                _exclusive(members)
        for _ in range(4):  # the target holds still: everyone gets there
            for n in names:
                held = _owner_epochs(members)
                members[n] = reconcile(members[n], epoch, target[n], dict(members[n].assigned),
                                       lambda t, p, h=held: h.get((t, p), -1))
                _exclusive(members)
        for n in names:
            m = members[n]
            assert (m.member_epoch, m.state) == (epoch, MemberState.STABLE), (n, m)
            assert {t: ps for t, ps in m.assigned.items() if ps} == {t: ps for t, ps in target[n].items() if ps}
