"""The classic group state machine, driven with a fake clock (no broker, no I/O)."""

from __future__ import annotations

import pytest
from group_harness import Harness, subscription

from strom.coordinator import records as rec
from strom.coordinator.group import ClassicGroup, GroupState, IllegalStateTransition, Member
from strom.protocol.errors import ErrorCode as E


def test_member_id_required_then_lone_member_forms_group() -> None:
    h = Harness()
    first = h.join(require_known=True)
    r = h.join_result(first)
    assert r.error is E.member_id_required and r.member_id.startswith("c-")
    assert h.state() == "Empty"  # a pending member is not a member yet
    tok = h.join(member_id=r.member_id, require_known=True)
    assert h.answer(tok) is None and h.state() == "PreparingRebalance"
    h.advance(0)  # group.initial.rebalance.delay.ms=0: the next tick completes the join
    j = h.join_result(tok)
    assert (j.error, j.generation_id, j.leader, j.member_id) == (E.none, 1, r.member_id, r.member_id)
    assert j.protocol_name == "range" and [m.member_id for m in j.members] == [r.member_id]
    assert j.members[0].metadata == subscription("t")
    assert h.state() == "CompletingRebalance"
    s = h.sync(r.member_id, 1, {r.member_id: b"A"})
    assert h.sync_result(s) == h.sync_result(s).__class__(E.none, "consumer", "range", b"A")
    assert h.state() == "Stable"
    stored = rec.decode_group_metadata_value(h.records[-1].value or b"")
    assert stored.generation == 1 and stored.members[0].assignment == b"A"


def test_pending_member_expires_after_session_timeout() -> None:
    h = Harness()
    r = h.join_result(h.join(require_known=True, session=6000))
    h.advance(6000)
    assert h.join_result(h.join(member_id=r.member_id)).error is E.unknown_member_id
    assert "g" not in h.shard.groups


def test_initial_rebalance_delay_waits_for_more_members_up_to_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join(rebalance=10_000)
    h.advance(1000)
    b = h.join(rebalance=10_000)
    h.advance(1999)
    assert h.answer(a) is None and h.answer(b) is None
    h.advance(1)  # t=3000: a member arrived meanwhile, so wait another delay
    assert h.answer(a) is None
    h.advance(2999)
    assert h.answer(a) is None
    h.advance(1)  # t=6000: nobody new, complete with both
    assert h.join_result(a).generation_id == h.join_result(b).generation_id == 1
    assert len(h.join_result(a).members) + len(h.join_result(b).members) == 2


def test_initial_delay_never_exceeds_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    toks = [h.join(rebalance=5000)]
    for _ in range(4):
        h.advance(1000)
        toks.append(h.join(rebalance=5000))
    h.advance(999)
    assert all(h.answer(t) is None for t in toks)
    # Delays: 3000, then min(3000, remaining 2000) = 2000: complete at t=5000 although members kept coming.
    h.advance(1)
    assert all(h.join_result(t).generation_id == 1 for t in toks)


def test_lone_member_with_default_delay_waits_three_seconds() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    tok = h.join()
    h.advance(2999)
    assert h.answer(tok) is None
    h.advance(1)
    assert h.join_result(tok).error is E.none


def test_three_members_get_one_generation_and_leader_gets_all_metadata() -> None:
    h = Harness()
    ids = h.form_group(3)
    assert len(set(ids)) == 3 and h.generation() == 1
    described = h.shard.describe_group("g")
    assert described.state == "Stable" and described.protocol_data == "range"
    assert {m.member_id: m.assignment for m in described.members} == {m: f"assignment-{m}".encode() for m in ids}


def test_follower_rejoin_with_same_metadata_in_stable_gets_current_generation() -> None:
    h = Harness()
    leader, follower = h.form_group(2)
    r = h.join_result(h.join(member_id=follower))
    assert (r.error, r.generation_id, r.leader, r.members) == (E.none, 1, leader, ())
    assert h.state() == "Stable"


def test_rejoin_with_changed_metadata_rebalances_and_others_learn_by_heartbeat() -> None:
    h = Harness()
    leader, follower = h.form_group(2)
    # Cooperative protocols rejoin with new owned partitions: new metadata -> rebalance.
    tok = h.join(member_id=follower, topics=("t", "u"))
    assert h.answer(tok) is None and h.state() == "PreparingRebalance"
    assert h.heartbeat(leader, 1) is E.rebalance_in_progress
    lt = h.join(member_id=leader)
    assert h.join_result(lt).generation_id == 2 and h.join_result(tok).generation_id == 2
    assert h.state() == "CompletingRebalance"
    assert h.heartbeat(leader, 2) is E.none
    assert h.heartbeat(leader, 1) is E.illegal_generation


def test_leader_rejoin_in_stable_triggers_rebalance() -> None:
    h = Harness()
    leader, follower = h.form_group(2)
    lt = h.join(member_id=leader)
    assert h.state() == "PreparingRebalance" and h.answer(lt) is None
    ft = h.join(member_id=follower)
    assert h.join_result(ft).generation_id == 2
    assert h.join_result(lt).leader == leader


def test_member_missing_rebalance_timeout_is_removed_at_join_completion() -> None:
    h = Harness()
    leader, follower = h.form_group(2)
    lt = h.join(member_id=leader, rebalance=20_000)
    h.advance(5000)
    assert h.heartbeat(follower, 1) is E.rebalance_in_progress  # alive but does not rejoin
    h.advance(15_000)
    r = h.join_result(lt)
    assert r.generation_id == 2 and [m.member_id for m in r.members] == [leader]
    assert h.heartbeat(follower, 2) is E.unknown_member_id


def test_session_timeout_removes_member_and_rebalances() -> None:
    h = Harness()
    leader, follower = h.form_group(2, session=6000)
    for _ in range(2):
        h.advance(2000)
        assert h.heartbeat(leader, 1) is E.none
    h.advance(1999)
    assert h.state() == "Stable"
    h.advance(1)
    # follower never heartbeated: gone after 6 s, leader told to rejoin
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(leader, 1) is E.rebalance_in_progress
    lt = h.join(member_id=leader)
    r = h.join_result(lt)
    assert r.generation_id == 2 and [m.member_id for m in r.members] == [leader]


def test_member_awaiting_join_does_not_expire() -> None:
    h = Harness()
    leader, follower = h.form_group(2, session=6000, rebalance=60_000)
    lt = h.join(member_id=leader, session=6000, rebalance=60_000)
    for _ in range(15):  # leader parked in JoinGroup for 5 session timeouts: still a member
        h.advance(2000)
        assert h.heartbeat(follower, 1) is E.rebalance_in_progress
    assert h.answer(lt) is None
    ft = h.join(member_id=follower, session=6000, rebalance=60_000)
    assert h.join_result(ft).generation_id == 2 and h.join_result(lt).error is E.none


def test_leave_group_rebalances_and_last_leave_empties_group() -> None:
    h = Harness()
    a, b = h.form_group(2)
    res = h.leave(b)
    assert res.error is E.none and res.members[0][1] is E.none
    assert h.state() == "PreparingRebalance"
    r = h.join_result(h.join(member_id=a))
    assert r.generation_id == 2
    h.sync(a, 2, {a: b"x"})
    h.leave(a)
    assert h.state() == "Empty" and h.generation() == 3
    last = rec.decode_group_metadata_value(h.records[-1].value or b"")
    assert last.generation == 3 and last.members == () and last.protocol is None


def test_leave_unknown_member_and_unknown_group() -> None:
    h = Harness()
    h.form_group(1)
    assert h.leave("nobody").members[0][1] is E.unknown_member_id
    assert h.leave("x", group="other").members[0][1] is E.unknown_member_id


def test_follower_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    h = Harness()
    leader, other = h.two_joined(rebalance=10_000, session=20_000)
    st = h.sync(leader, 1, {leader: b"L", other: b"O"})
    assert h.sync_result(st).assignment == b"L"
    h.advance(10_000)
    assert h.state() == "PreparingRebalance"
    assert other not in h.shard.groups["g"].members


def test_sync_before_leader_waits_and_gets_its_assignment() -> None:
    h = Harness()
    leader, other = h.two_joined()
    ft = h.sync(other, 1)
    assert h.answer(ft) is None
    h.sync(leader, 1, {leader: b"L", other: b"O"})
    assert h.sync_result(ft).assignment == b"O"


def test_leader_assignment_missing_a_member_gives_it_empty_assignment() -> None:
    h = Harness()
    leader, other = h.two_joined()
    h.sync(leader, 1, {leader: b"L"})
    assert h.sync_result(h.sync(other, 1)).assignment == b""


def test_rebalance_during_completing_rebalance_fails_parked_syncs() -> None:
    h = Harness()
    leader, other = h.two_joined()
    ft = h.sync(other, 1)
    h.join()  # a newcomer forces a new rebalance before the leader syncs
    assert h.sync_result(ft).error is E.rebalance_in_progress


def test_sync_errors() -> None:
    h = Harness()
    a, = h.form_group(1)
    assert h.sync_result(h.sync(a, 7)).error is E.illegal_generation
    assert h.sync_result(h.sync("nobody", 1)).error is E.unknown_member_id
    assert h.sync_result(h.sync(a, 1, group="nope")).error is E.unknown_member_id
    h.join(member_id=a)  # leader rejoin -> PreparingRebalance... completes at once (only member)
    assert h.state() == "CompletingRebalance"
    h2 = Harness()
    x, y = h2.form_group(2)
    h2.join(member_id=x)
    assert h2.sync_result(h2.sync(y, 1)).error is E.rebalance_in_progress


def test_join_errors() -> None:
    h = Harness(min_session_timeout_ms=6000, max_session_timeout_ms=60_000)
    assert h.join_result(h.join(session=5999)).error is E.invalid_session_timeout
    assert h.join_result(h.join(session=60_001)).error is E.invalid_session_timeout
    assert h.join_result(h.join(group="")).error is E.invalid_group_id
    assert h.join_result(h.join(member_id="ghost")).error is E.unknown_member_id
    assert not h.shard.groups
    h.form_group(1)
    bad = h.join(protocols=[("roundrobin", b"")])
    assert h.join_result(bad).error is E.inconsistent_group_protocol
    other_type = h.join(protocol_type="connect")
    assert h.join_result(other_type).error is E.inconsistent_group_protocol


def test_group_max_size() -> None:
    h = Harness(max_size=2)
    h.form_group(2)
    assert h.join_result(h.join()).error is E.group_max_size_reached


def test_protocol_selection_by_vote() -> None:
    h = Harness()
    sub = subscription("t")
    t1 = h.join(protocols=[("range", sub), ("roundrobin", sub)])
    t2 = h.join(protocols=[("roundrobin", sub), ("range", sub)])
    t3 = h.join(protocols=[("roundrobin", sub), ("range", sub), ("sticky", sub)])
    h.advance(0)
    assert {h.join_result(t).protocol_name for t in (t1, t2, t3)} == {"roundrobin"}


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    t1 = h.join(instance="i-1", client_id="a")
    t2 = h.join(instance="i-2", client_id="b")
    h.advance(0)
    r1, r2 = h.join_result(t1), h.join_result(t2)
    leader = r1.leader
    assign = {r1.member_id: b"P1", r2.member_id: b"P2"}
    h.sync(r2.member_id, 1, instance="i-2")
    h.sync(leader, 1, assign, instance="i-1")
    assert h.state() == "Stable"
    # i-2 restarts: a new process, no member id
    rt = h.join(instance="i-2", client_id="b")
    r = h.join_result(rt)
    assert r.error is E.none and r.member_id != r2.member_id and r.generation_id == 1
    assert r.leader == leader and r.members == ()
    assert h.state() == "Stable"
    assert h.sync_result(h.sync(r.member_id, 1, instance="i-2")).assignment == b"P2"
    # the old incarnation is fenced
    assert h.heartbeat(r2.member_id, 1, instance="i-2") is E.fenced_instance_id
    assert h.heartbeat(r.member_id, 1, instance="i-2") is E.none
    stored = rec.decode_group_metadata_value(h.records[-1].value or b"")
    assert {m.group_instance_id: m.member_id for m in stored.members}["i-2"] == r.member_id


def test_static_leader_restart_does_not_make_new_incarnation_leader_of_record() -> None:
    h = Harness()
    t1 = h.join(instance="i-1")
    h.advance(0)
    old = h.join_result(t1).member_id
    h.sync(old, 1, {old: b"A"}, instance="i-1")
    r = h.join_result(h.join(instance="i-1"))
    assert r.leader == old != r.member_id  # so the client does not run a pointless assignment
    assert h.shard.groups["g"].leader_id == r.member_id


def test_static_member_rejoin_fails_to_store_reverts() -> None:
    h = Harness()
    t1 = h.join(instance="i-1")
    h.advance(0)
    old = h.join_result(t1).member_id
    h.sync(old, 1, {old: b"A"}, instance="i-1")
    h.fail_next_append = True
    r = h.join_result(h.join(instance="i-1"))
    assert r.error is E.coordinator_not_available
    assert h.shard.groups["g"].static_members["i-1"] == old
    assert h.heartbeat(old, 1, instance="i-1") is E.none


def test_static_member_not_removed_when_it_misses_a_rebalance_but_by_session_timeout() -> None:
    h = Harness()
    t1 = h.join(instance="i-1", session=6000)
    t2 = h.join(session=6000)
    h.advance(0)
    r1, r2 = h.join_result(t1), h.join_result(t2)
    h.sync(r1.member_id, 1, {}, instance="i-1")
    h.sync(r2.member_id, 1, {})
    h.leave(r2.member_id)  # -> PreparingRebalance; the static member does not rejoin
    h.advance(3000)
    assert r1.member_id in h.shard.groups["g"].members
    h.advance(3000)  # its session expires
    assert h.state() == "Empty"


def test_static_member_leave_by_instance_id() -> None:
    h = Harness()
    t1 = h.join(instance="i-1")
    h.advance(0)
    res = h.leave("", instance="i-1")
    assert res.members[0][1] is E.none and h.state() == "Empty"
    assert h.join_result(t1).error is E.none


def test_fenced_static_member_leave() -> None:
    h = Harness()
    h.join(instance="i-1")
    h.advance(0)
    assert h.leave("someone-else", instance="i-1").members[0][1] is E.fenced_instance_id


def test_failed_sync_store_fails_members_and_rebalances() -> None:
    h = Harness()
    leader, other = h.two_joined()
    ft = h.sync(other, 1)
    h.fail_next_append = True
    lt = h.sync(leader, 1, {leader: b"L", other: b"O"})
    assert h.sync_result(lt).error is E.coordinator_not_available
    assert h.sync_result(ft).error is E.coordinator_not_available
    assert h.state() == "PreparingRebalance"


def test_new_member_parked_join_times_out() -> None:
    h = Harness(new_member_join_timeout_ms=300_000)
    a, = h.form_group(1)
    h.join(member_id=a, rebalance=600_000)  # leader rejoins: completes alone
    h.sync(a, 2, {a: b""})
    newcomer = h.join(rebalance=600_000)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(a, 2) is E.rebalance_in_progress
    for _ in range(60):  # the old member is alive but slow to rejoin
        h.advance(5000)
        assert h.heartbeat(a, 2) is E.rebalance_in_progress
    # After 5 minutes the newcomer's JoinGroup is dropped: its client may be long gone.
    assert h.join_result(newcomer).error is E.unknown_member_id
    r = h.join_result(h.join(member_id=a))
    assert r.generation_id == 3 and [m.member_id for m in r.members] == [a]


def test_heartbeat_errors() -> None:
    h = Harness()
    a, = h.form_group(1)
    assert h.heartbeat(a, 1) is E.none
    assert h.heartbeat("x", 1) is E.unknown_member_id
    assert h.heartbeat(a, 1, group="zzz") is E.unknown_member_id
    assert h.heartbeat(a, 0) is E.illegal_generation


def test_state_transitions_follow_kafkas_table() -> None:
    g = ClassicGroup("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE, 0)
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.transition_to(GroupState.COMPLETING_REBALANCE, 2)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.EMPTY, 3)
    g.transition_to(GroupState.STABLE, 3)
    assert g.state_timestamp == 3


def test_list_and_describe() -> None:
    h = Harness()
    h.form_group(2, group="a")
    h.commit({("t", 0): 5}, group="b")
    listed = {g.group_id: (g.state, g.protocol_type) for g in h.shard.list_groups()}
    assert listed == {"a": ("Stable", "consumer"), "b": ("Empty", "")}
    assert [g.group_id for g in h.shard.list_groups(states={"empty"})] == ["b"]
    assert [g.group_id for g in h.shard.list_groups(states={"Stable"})] == ["a"]
    assert h.shard.list_groups(types={"consumer"}) == []
    assert len(h.shard.list_groups(types={"Classic"})) == 2
    assert h.shard.describe_group("nope").state == "Dead"
    h.join(group="a")  # rebalance: members described without metadata
    d = h.shard.describe_group("a")
    assert d.state == "PreparingRebalance" and all(m.assignment == b"" for m in d.members)


def test_member_matches_exact_protocol_list() -> None:
    m = Member("m", None, "c", "h", 1, 1, "consumer", [("range", b"x")])
    assert m.matches([("range", b"x")]) and not m.matches([("range", b"y")])
