"""The consumer protocol's server-side assignors (KIP-848): `uniform` and `range`, as pure functions."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.coordinator.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    GroupAssignment,
    MemberSubscription,
    PartitionAssignor,
    RangeAssignor,
    SubscribedTopicDescriber,
    UniformAssignor,
    UnsupportedAssignor,
    get_assignor,
)

T = [uuid.UUID(int=i + 1) for i in range(6)]  # topic ids, in sorted order
A, B, C = T[0], T[1], T[2]
UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
BOTH = pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])


def topics(**counts: int) -> SubscribedTopicDescriber:
    names = {"a": A, "b": B, "c": C, "d": T[3], "e": T[4], "f": T[5]}
    return SubscribedTopicDescriber({names[k]: v for k, v in counts.items()})


def member(member_id: str, *subscribed: uuid.UUID, current: Mapping[uuid.UUID, Iterable[int]] | None = None,
           instance_id: str | None = None) -> MemberSubscription:
    return MemberSubscription(member_id, frozenset(subscribed),
                              {t: frozenset(ps) for t, ps in (current or {}).items()}, instance_id)


def again(members: Iterable[MemberSubscription], result: GroupAssignment) -> list[MemberSubscription]:
    """The members with `result` as their current target assignment (the next rebalance's input)."""
    return [MemberSubscription(m.member_id, m.subscribed_topic_ids,
                               {t: frozenset(ps) for t, ps in result.get(m.member_id, {}).items()},
                               m.instance_id) for m in members]


def sizes(result: GroupAssignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def owners(result: GroupAssignment) -> dict[tuple[uuid.UUID, int], list[str]]:
    out: dict[tuple[uuid.UUID, int], list[str]] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out


def moved(before: GroupAssignment, after: GroupAssignment) -> int:
    """Partitions that change owner between two assignments (those of members gone included)."""
    a, b = owners(before), owners(after)
    return sum(1 for tp, ms in a.items() if b.get(tp) != ms)


def check_valid(members: list[MemberSubscription], described: SubscribedTopicDescriber,
                result: GroupAssignment) -> None:
    """Every partition of a subscribed topic assigned exactly once, to a member subscribed to it."""
    subs = {m.member_id: m.subscribed_topic_ids for m in members}
    assert set(result) == set(subs)
    for m, a in result.items():
        for t, ps in a.items():
            assert t in subs[m], f"{m} got {t} it does not subscribe to"
            assert ps and list(ps) == sorted(set(ps)), "sorted, unique, non-empty"
    wanted = {(t, p) for s in subs.values() for t in s for p in range(described.num_partitions(t))}
    got = owners(result)
    assert set(got) == wanted
    assert all(len(ms) == 1 for ms in got.values())


# -- registry ------------------------------------------------------------------------------------------

def test_registry_names_and_default() -> None:
    assert list(ASSIGNORS) == ["uniform", "range"]  # Kafka's default group.consumer.assignors
    assert DEFAULT_ASSIGNOR == "uniform"
    assert all(get_assignor(name).name == name for name in ASSIGNORS)
    assert isinstance(get_assignor("range"), RangeAssignor)
    with pytest.raises(UnsupportedAssignor) as e:
        get_assignor("cooperative-sticky")
    assert e.value.name == "cooperative-sticky"
    # A broker configured with fewer assignors offers only those.
    only_range: dict[str, PartitionAssignor] = {"range": RANGE}
    with pytest.raises(UnsupportedAssignor):
        get_assignor("uniform", only_range)


def test_negative_partition_count_is_refused() -> None:
    with pytest.raises(ValueError):
        SubscribedTopicDescriber({A: -1})


@BOTH
def test_duplicate_member_ids_are_refused(assignor: PartitionAssignor) -> None:
    with pytest.raises(ValueError):
        assignor.assign([member("m", A), member("m", A)], topics(a=1))


# -- edge cases ----------------------------------------------------------------------------------------

@BOTH
def test_empty_group(assignor: PartitionAssignor) -> None:
    assert assignor.assign([], topics(a=3)) == {}


@BOTH
def test_members_without_subscriptions_get_nothing(assignor: PartitionAssignor) -> None:
    assert assignor.assign([member("m1"), member("m2")], topics(a=3)) == {"m1": {}, "m2": {}}


@BOTH
def test_topics_with_no_partitions_or_unknown_are_skipped(assignor: PartitionAssignor) -> None:
    # `c` is not in the metadata (deleted since the subscription was resolved): nothing to assign.
    result = assignor.assign([member("m1", A, B, C), member("m2", A, B, C)], topics(a=0, b=2))
    assert result == {"m1": {B: (0,)}, "m2": {B: (1,)}}


@BOTH
def test_more_members_than_partitions(assignor: PartitionAssignor) -> None:
    ms = [member(f"m{i}", A) for i in range(5)]
    result = assignor.assign(ms, topics(a=2))
    check_valid(ms, topics(a=2), result)
    assert sorted(sizes(result).values()) == [0, 0, 0, 1, 1]


@BOTH
def test_invalid_current_assignment_is_dropped(assignor: PartitionAssignor) -> None:
    """Out-of-range partitions, unsubscribed topics and a partition held twice are not trusted."""
    ms = [member("m1", A, current={A: [0, 1, 7], B: [0]}), member("m2", A, current={A: [1, 2]})]
    result = assignor.assign(ms, topics(a=4, b=1))
    check_valid(ms, topics(a=4, b=1), result)
    assert sizes(result) == {"m1": 2, "m2": 2}


# -- uniform -------------------------------------------------------------------------------------------

def test_uniform_fresh_homogeneous_group() -> None:
    ms = [member(f"m{i}", A, B) for i in range(4)]
    result = UNIFORM.assign(ms, topics(a=6, b=6))
    check_valid(ms, topics(a=6, b=6), result)
    assert sizes(result) == {"m0": 3, "m1": 3, "m2": 3, "m3": 3}
    assert result["m0"] == {A: (0, 1, 2)} and result["m3"] == {B: (3, 4, 5)}


def test_uniform_homogeneous_counts_differ_by_at_most_one() -> None:
    ms = [member(f"m{i}", A, B, C) for i in range(7)]
    result = UNIFORM.assign(ms, topics(a=10, b=3, c=7))
    check_valid(ms, topics(a=10, b=3, c=7), result)
    assert sorted(sizes(result).values()) == [2, 3, 3, 3, 3, 3, 3]


def test_uniform_join_moves_only_what_balance_needs() -> None:
    described = topics(a=12, b=12)
    ms = [member(f"m{i}", A, B) for i in range(4)]
    first = UNIFORM.assign(ms, described)
    joined = [*again(ms, first), member("m4", A, B)]
    second = UNIFORM.assign(joined, described)
    check_valid(joined, described, second)
    # 24 over 5: four members keep 5 of their 6, the newcomer gets the 4 they give up.
    assert sorted(sizes(second).values()) == [4, 5, 5, 5, 5]
    assert moved(first, second) == 4
    for m in ms:  # the members that stay only give up partitions
        assert all(set(ps) <= set(first[m.member_id][t]) for t, ps in second[m.member_id].items())


def test_uniform_leave_moves_only_the_leavers_partitions() -> None:
    described = topics(a=10, b=5)
    ms = [member(f"m{i}", A, B) for i in range(5)]
    first = UNIFORM.assign(ms, described)
    left = again(ms, first)[:2] + again(ms, first)[3:]  # m2 leaves
    second = UNIFORM.assign(left, described)
    check_valid(left, described, second)
    assert sorted(sizes(second).values()) == [3, 4, 4, 4]
    for m in left:  # everyone keeps everything and gains m2's
        assert all(set(ps) <= set(second[m.member_id].get(t, ())) for t, ps in first[m.member_id].items())


def test_uniform_extra_partitions_go_to_the_members_that_hold_the_most() -> None:
    # 7 partitions over 2 members: the one holding 5 keeps 4, not 3, so only one partition moves.
    described = topics(a=7)
    ms = [member("m1", A, current={A: [0, 1]}), member("m2", A, current={A: [2, 3, 4, 5, 6]})]
    result = UNIFORM.assign(ms, described)
    assert result == {"m1": {A: (0, 1, 6)}, "m2": {A: (2, 3, 4, 5)}}


def test_uniform_subscription_change() -> None:
    described = topics(a=6, b=6)
    ms = [member("m1", A), member("m2", A)]
    first = UNIFORM.assign(ms, described)
    # m2 adds b: heterogeneous now; m1 keeps a (it alone has it), m2 keeps its a partitions.
    changed = again(ms, first)
    changed[1] = member("m2", A, B, current=first["m2"])
    second = UNIFORM.assign(changed, described)
    check_valid(changed, described, second)
    assert sizes(second) == {"m1": 6, "m2": 6}
    # m1 drops a for b: the a partitions it held leave it, m2 keeps what it can.
    swapped = [member("m1", B, current=second["m1"]), member("m2", A, B, current=second["m2"])]
    third = UNIFORM.assign(swapped, described)
    check_valid(swapped, described, third)
    assert A not in third["m1"] and sizes(third) == {"m1": 6, "m2": 6}


def test_uniform_partition_count_increase_keeps_current_partitions() -> None:
    ms = [member(f"m{i}", A) for i in range(3)]
    first = UNIFORM.assign(ms, topics(a=6))
    second = UNIFORM.assign(again(ms, first), topics(a=9))
    check_valid(ms, topics(a=9), second)
    assert sizes(second) == {"m0": 3, "m1": 3, "m2": 3}
    for m in ms:
        assert set(first[m.member_id][A]) <= set(second[m.member_id][A])


def test_uniform_heterogeneous_places_by_load() -> None:
    # a: only m1; b: m1 and m2; c: m2 and m3. m1 is filled by a, so b goes to m2, c to m3.
    ms = [member("m1", A, B), member("m2", B, C), member("m3", C)]
    described = topics(a=6, b=6, c=6)
    result = UNIFORM.assign(ms, described)
    check_valid(ms, described, result)
    assert sizes(result) == {"m1": 6, "m2": 6, "m3": 6}
    assert result["m1"] == {A: tuple(range(6))}


def test_uniform_heterogeneous_balances_a_sticky_imbalance() -> None:
    # m1 holds all of b from before m3 joined; b moves from m1 to m3 until they are even.
    described = topics(a=4, b=8)
    ms = [member("m1", A, B, current={B: range(8)}), member("m2", A, current={A: range(4)}), member("m3", B)]
    result = UNIFORM.assign(ms, described)
    check_valid(ms, described, result)
    assert sizes(result) == {"m1": 4, "m2": 4, "m3": 4}
    assert set(result["m1"][B]) < set(range(8)) and result["m2"] == {A: (0, 1, 2, 3)}


def test_uniform_heterogeneous_moves_newly_placed_partitions_before_kept_ones() -> None:
    # a (8, ratio 4) is placed before c (3, ratio 3): m1 and m2 get 4 of a each, then c makes m1
    # 7 against 4, and balancing a moves one of the partitions m1 was just given, not a0 it held.
    described = topics(a=8, c=3)
    ms = [member("m1", A, C, current={A: [0]}), member("m2", A, current={A: [1]})]
    result = UNIFORM.assign(ms, described)
    assert result == {"m1": {A: (0, 2, 4), C: (0, 1, 2)}, "m2": {A: (1, 3, 5, 6, 7)}}


# -- range ---------------------------------------------------------------------------------------------

def test_range_fresh_group_is_kafkas_layout() -> None:
    ms = [member(f"m{i}", A, B) for i in range(3)]
    result = RANGE.assign(ms, topics(a=7, b=3))
    assert result == {
        "m0": {A: (0, 1, 2), B: (0,)},
        "m1": {A: (3, 4), B: (1,)},
        "m2": {A: (5, 6), B: (2,)},
    }


def test_range_static_members_come_first_by_instance_id() -> None:
    ms = [member("a", A), member("b", A, instance_id="z"), member("c", A, instance_id="y")]
    assert RANGE.assign(ms, topics(a=3)) == {"a": {A: (2,)}, "b": {A: (1,)}, "c": {A: (0,)}}


def test_range_co_partitions_topics_with_equal_counts() -> None:
    ms = [member(f"m{i}", A, B, C) for i in range(4)]
    result = RANGE.assign(ms, topics(a=10, b=10, c=3))
    for m in result.values():
        assert m[A] == m[B]
    # ... and keeps it through a join, even when the newcomer sorts first.
    joined = [member("l0", A, B, C), *again(ms, result)]
    second = RANGE.assign(joined, topics(a=10, b=10, c=3))
    check_valid(joined, topics(a=10, b=10, c=3), second)
    for m in second.values():
        assert m.get(A) == m.get(B)


def test_range_co_partitions_heterogeneous_subscribers() -> None:
    # a and b have the same subscribers and count: co-partitioned; c has other subscribers.
    ms = [member("m1", A, B, C), member("m2", A, B), member("m3", C)]
    result = RANGE.assign(ms, topics(a=4, b=4, c=4))
    assert result == {"m1": {A: (0, 1), B: (0, 1), C: (0, 1)}, "m2": {A: (2, 3), B: (2, 3)}, "m3": {C: (2, 3)}}


def test_range_join_keeps_members_on_the_range_they_hold_most_of() -> None:
    ms = [member(f"m{i}", A) for i in (1, 2, 3)]
    first = RANGE.assign(ms, topics(a=12))
    assert first == {"m1": {A: (0, 1, 2, 3)}, "m2": {A: (4, 5, 6, 7)}, "m3": {A: (8, 9, 10, 11)}}
    # m0 sorts first: Kafka 4 would shift every range; here the holders keep theirs.
    joined = [member("m0", A), *again(ms, first)]
    second = RANGE.assign(joined, topics(a=12))
    assert second == {"m0": {A: (6, 7, 8)}, "m1": {A: (0, 1, 2)}, "m2": {A: (3, 4, 5)}, "m3": {A: (9, 10, 11)}}
    assert moved(first, second) == 4


def test_range_leave_and_partition_increase() -> None:
    ms = [member(f"m{i}", A) for i in range(4)]
    first = RANGE.assign(ms, topics(a=12))
    left = [m for m in again(ms, first) if m.member_id != "m1"]
    second = RANGE.assign(left, topics(a=12))
    assert second == {"m0": {A: (0, 1, 2, 3)}, "m2": {A: (4, 5, 6, 7)}, "m3": {A: (8, 9, 10, 11)}}
    third = RANGE.assign(again(left, second), topics(a=15))
    assert third == {"m0": {A: (0, 1, 2, 3, 4)}, "m2": {A: (5, 6, 7, 8, 9)}, "m3": {A: (10, 11, 12, 13, 14)}}


def test_range_subscription_change() -> None:
    ms = [member("m1", A, B), member("m2", A, B)]
    first = RANGE.assign(ms, topics(a=4, b=4))
    changed = [member("m1", A, B, current=first["m1"]), member("m2", A, current=first["m2"])]
    second = RANGE.assign(changed, topics(a=4, b=4))
    assert second == {"m1": {A: (0, 1), B: (0, 1, 2, 3)}, "m2": {A: (2, 3)}}


def test_range_ignores_non_contiguous_current_assignment_shape() -> None:
    # From another assignor: the ranges still come out contiguous, each on its largest overlap.
    ms = [member("m1", A, current={A: [1, 3, 5]}), member("m2", A, current={A: [0, 2, 4]})]
    result = RANGE.assign(ms, topics(a=6))
    check_valid(ms, topics(a=6), result)
    assert sorted(result.values(), key=str) == sorted([{A: (0, 1, 2)}, {A: (3, 4, 5)}], key=str)


# -- determinism ---------------------------------------------------------------------------------------

@BOTH
def test_output_does_not_depend_on_input_order(assignor: PartitionAssignor) -> None:
    rnd = random.Random(7)
    described = topics(a=13, b=5, c=8, d=1)
    ms = [member(f"m{i:02d}", *rnd.sample(T[:4], rnd.randint(1, 4))) for i in range(12)]
    expected = assignor.assign(ms, described)
    for _ in range(5):
        rnd.shuffle(ms)
        shuffled = SubscribedTopicDescriber(dict(rnd.sample(list(described.partition_counts.items()), 4)))
        result = assignor.assign(ms, shuffled)
        assert result == expected
        assert list(result) == sorted(result)  # members in id order, topics in id order
        assert all(list(a) == sorted(a) for a in result.values())


# -- properties over random groups ---------------------------------------------------------------------

@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[list[MemberSubscription], SubscribedTopicDescriber]:
    n_topics = draw(st.integers(1, 4))
    counts = {T[i]: draw(st.integers(0, 12)) for i in range(n_topics)}
    n_members = draw(st.integers(1, 8))
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    shared = frozenset(draw(st.sets(st.sampled_from(T[:n_topics]), min_size=1)))
    ms: list[MemberSubscription] = []
    for i in range(n_members):
        subs = shared if same else frozenset(draw(st.sets(st.sampled_from(T[:n_topics]))))
        # A current assignment that may be anything: partitions held twice, out of range, unsubscribed.
        current = draw(st.dictionaries(st.sampled_from(T[:n_topics]), st.frozensets(st.integers(0, 14), max_size=6),
                                       max_size=3))
        instance = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3"])))
        ms.append(MemberSubscription(f"m{i}", subs, current, instance if instance not in
                                     {m.instance_id for m in ms} else None))
    return ms, SubscribedTopicDescriber(counts)


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(groups())
def test_uniform_properties(group: tuple[list[MemberSubscription], SubscribedTopicDescriber]) -> None:
    ms, described = group
    result = UNIFORM.assign(ms, described)
    check_valid(ms, described, result)
    load = sizes(result)
    by_topic = owners(result)
    # Balance: no subscriber of a topic holding one of its partitions has 2 more than another subscriber.
    for t in described.partition_counts:
        subs = [m.member_id for m in ms if t in m.subscribed_topic_ids]
        if not subs:
            continue
        holders = {by_topic[(t, p)][0] for p in range(described.num_partitions(t))}
        for h in holders:
            assert all(load[h] - load[s] <= 1 for s in subs)
    if len({m.subscribed_topic_ids for m in ms}) == 1 and load:
        assert max(load.values()) - min(load.values()) <= 1
    # Sticky: run again on its own output and nothing moves.
    assert UNIFORM.assign(again(ms, result), described) == result


@PROPERTY
@given(groups(homogeneous=True), st.data())
def test_uniform_homogeneous_keeps_its_quota_of_current_partitions(
    group: tuple[list[MemberSubscription], SubscribedTopicDescriber], data: st.DataObject
) -> None:
    ms, described = group
    first = UNIFORM.assign(ms, described)
    # Members join and leave; each remaining member keeps min(what it held, the new minimum quota).
    survivors = [m for m in again(ms, first) if data.draw(st.booleans())]
    joiners = [member(f"n{i}", *ms[0].subscribed_topic_ids) for i in range(data.draw(st.integers(0, 3)))]
    after = survivors + joiners
    second = UNIFORM.assign(after, described)
    check_valid(after, described, second)
    if not after:
        return
    quota = sum(described.num_partitions(t) for t in ms[0].subscribed_topic_ids) // len(after)
    for m in survivors:
        held = {(t, p) for t, ps in first[m.member_id].items() for p in ps}
        kept = {(t, p) for t, ps in second[m.member_id].items() for p in ps} & held
        assert len(kept) >= min(len(held), quota)


@PROPERTY
@given(groups())
def test_range_properties(group: tuple[list[MemberSubscription], SubscribedTopicDescriber]) -> None:
    ms, described = group
    result = RANGE.assign(ms, described)
    check_valid(ms, described, result)
    for t, count in described.partition_counts.items():
        subs = [m.member_id for m in ms if t in m.subscribed_topic_ids]
        if not subs or not count:
            continue
        got = [result[s].get(t, ()) for s in subs]
        # Contiguous ranges of sizes that differ by at most one.
        assert all(list(ps) == list(range(ps[0], ps[0] + len(ps))) for ps in got if ps)
        assert max(map(len, got)) - min(map(len, got)) <= 1
    # Co-partitioning: topics with the same subscribers and count give each member the same partitions.
    for t1 in described.partition_counts:
        for t2 in described.partition_counts:
            s1 = {m.member_id for m in ms if t1 in m.subscribed_topic_ids}
            s2 = {m.member_id for m in ms if t2 in m.subscribed_topic_ids}
            if s1 == s2 and described.num_partitions(t1) == described.num_partitions(t2):
                assert all(result[m].get(t1) == result[m].get(t2) for m in s1)
    # Sticky: run again on its own output and nothing moves.
    assert RANGE.assign(again(ms, result), described) == result


@settings(max_examples=50, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_both_deterministic_under_reordering(
    group: tuple[list[MemberSubscription], SubscribedTopicDescriber], rnd: random.Random
) -> None:
    ms, described = group
    for assignor in (UNIFORM, RANGE):
        expected = assignor.assign(ms, described)
        shuffled = list(ms)
        rnd.shuffle(shuffled)
        assert assignor.assign(shuffled, described) == expected
