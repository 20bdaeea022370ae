"""Online migration between the classic and the consumer protocol (coordinator/migration.py), on the
pure shard: a consumer-protocol member joining a classic group upgrades it, the classic members go
on in the consumer group (JoinGroup/SyncGroup/Heartbeat served by it), the last consumer-protocol
member leaving downgrades it, and group.consumer.migration.policy blocks either direction."""

from __future__ import annotations

import struct
import uuid

import pytest
from group_harness import Harness

from strom.coordinator import consumer_records as cr
from strom.coordinator import records as rec
from strom.coordinator.consumer_group import HeartbeatError, HeartbeatRequest, HeartbeatResponse, TopicImage
from strom.coordinator.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from strom.coordinator.migration import MigrationPolicy
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E

T = uuid.UUID(int=11)
TOPICS = {"t": TopicImage(T, 6)}


def subscription_v1(topics: tuple[str, ...], owned: dict[str, set[int]]) -> bytes:
    """ConsumerProtocolSubscription v1: topics, null user data, owned partitions."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">ii", -1, len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps))
    return out


def classic_group(h: Harness, protocol: str = "cooperative-sticky") -> tuple[str, str, int]:
    """Two classic members of group g on t: a has 0-2, b has 3-5, offsets committed at 10."""
    ids = h.form_group(2, protocols=[(protocol, subscription_v1(("t",), {}))])
    a, b = ids
    gen = h.generation()
    # The leader's assignment, as a client-side assignor writes it.
    h.shard.groups["g"].members[a].assignment = encode_assignment({"t": frozenset({0, 1, 2})}, 1)
    h.shard.groups["g"].members[b].assignment = encode_assignment({"t": frozenset({3, 4, 5})}, 1)
    assert h.commit({("t", p): 10 for p in range(6)}, a, gen) == {("t", p): E.none for p in range(6)}
    return a, b, gen


def cg_join(h: Harness, member: str, group: str = "g") -> HeartbeatResponse:
    return h.shard.consumer_group_heartbeat(h.now, HeartbeatRequest(
        group, member, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}), TOPICS)


def cg_beat(h: Harness, member: str, epoch: int, owned: set[int]) -> HeartbeatResponse:
    return h.shard.consumer_group_heartbeat(h.now, HeartbeatRequest("g", member, epoch, owned={T: frozenset(owned)}),
                                            TOPICS)


def rejoin(h: Harness, member: str, owned: set[int], protocol: str = "cooperative-sticky") -> tuple[int, set[int]]:
    """A classic member's JoinGroup + SyncGroup: (generation, partitions)."""
    j = h.join_result(h.join(member, protocols=[(protocol, subscription_v1(("t",), {"t": owned}))]))
    assert j.error is E.none and j.leader == "" and j.protocol_name == protocol, j
    s = h.sync_result(h.sync(member, j.generation_id))
    assert s.error is E.none, s
    return j.generation_id, set(decode_assignment(s.assignment).get("t", frozenset()))


def types(h: Harness) -> dict[str, str]:
    return {g.group_id: g.group_type for g in h.shard.list_groups()}


def test_the_consumer_protocol_codecs() -> None:
    sub = decode_subscription(subscription_v1(("t", "u"), {"t": {1, 2}}))
    assert (sub.version, sub.topics, sub.owned_partitions) == (1, ("t", "u"), {"t": frozenset({1, 2})})
    assert decode_subscription(struct.pack(">hih1si", 0, 1, 1, b"t", -1)).owned_partitions == {}
    raw = encode_assignment({"t": frozenset({5, 1}), "a": frozenset({0})}, 3)
    assert decode_assignment(raw) == {"t": frozenset({1, 5}), "a": frozenset({0})}
    assert decode_assignment(b"") == {}
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(b"\x00\x01\x00")


def test_policy_names_are_case_insensitive() -> None:
    assert MigrationPolicy.parse("BiDirectional") is MigrationPolicy.BIDIRECTIONAL
    assert MigrationPolicy.UPGRADE.upgrade_enabled and not MigrationPolicy.UPGRADE.downgrade_enabled
    assert not MigrationPolicy.DISABLED.upgrade_enabled and not MigrationPolicy.DISABLED.downgrade_enabled


def test_upgrade_keeps_members_partitions_and_offsets_then_downgrade() -> None:
    h = Harness(TOPICS)
    a, b, gen = classic_group(h)
    n = cg_join(h, "n")
    assert types(h) == {"g": "consumer"}
    group = h.shard.consumer_groups["g"]
    assert {m.member_id: m.uses_classic_protocol for m in group.members.values()} == {a: True, b: True, "n": False}
    # n's share is still held by a and b: it gets nothing until they let it go.
    assert n.assignment == {} and group.group_epoch == gen + 1
    deferred = h.shard.take_deferred()
    keys = [rec.decode_key(r.key) for r in deferred.records]
    assert keys[0] == rec.GroupMetadataKey("g") and deferred.records[0].value is None  # the classic group goes
    # ... and the consumer group comes in its place, its classic members with their session
    # timeouts and protocols (ConsumerGroupMemberMetadata's tagged ClassicMemberMetadata).
    assert all(isinstance(k, rec.ConsumerGroupKey) and r.value is not None for k, r in zip(keys[1:], deferred.records[1:], strict=True))
    members = {k.sub: cr.decode_value(k.record_type, r.value) for k, r in zip(keys, deferred.records, strict=True)
               if isinstance(k, rec.ConsumerGroupKey) and k.record_type == rec.CONSUMER_GROUP_MEMBER_METADATA
               and r.value is not None}
    assert set(members) == {a, b}
    for m in (a, b):
        value = members[m]
        assert isinstance(value, cr.ConsumerGroupMemberMetadataValue) and value.classic_member is not None
        classic = group.members[m].classic
        assert classic is not None and value.classic_member.session_timeout_ms == classic.session_timeout_ms
        assert [name for name, _ in value.classic_member.supported_protocols] == ["cooperative-sticky"]
    reloaded = GroupCoordinatorShard(h.shard.config)  # what was written reads back as the same group
    for r in deferred.records:
        reloaded.replay(r.key, r.value, h.now)
    reloaded.loaded(h.now)
    assert {m: x.classic for m, x in reloaded.consumer_groups["g"].members.items()} == {
        m: x.classic for m, x in group.members.items() if m in (a, b)}
    assert {k.record_type for k in keys[1:]} >= {rec.CONSUMER_GROUP_METADATA, rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                                   rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT}
    assert h.shard.describe_group("g").state == "Dead"  # DescribeGroups: not a classic group
    assert h.committed() == {("t", p): 10 for p in range(6)}

    # The classic members learn of the new epoch from their heartbeats and rejoin.
    assert h.heartbeat(a, gen) is E.rebalance_in_progress
    gen_a, kept_a = rejoin(h, a, {0, 1, 2})
    assert gen_a == gen and kept_a < {0, 1, 2}  # it syncs, revokes what moves, and rejoins
    assert h.heartbeat(a, gen_a) is E.rebalance_in_progress  # still to revoke
    gen_a, got_a = rejoin(h, a, kept_a)
    assert gen_a == gen + 1 and got_a == kept_a
    assert h.heartbeat(a, gen_a) is E.none
    assert h.heartbeat(b, gen) is E.rebalance_in_progress
    gen_b, kept_b = rejoin(h, b, {3, 4, 5})
    gen_b, got_b = rejoin(h, b, kept_b)
    assert gen_b == gen + 1 and got_b == kept_b < {3, 4, 5}
    n2 = cg_beat(h, "n", n.member_epoch, set())
    got_n = set(n2.assignment[T]) if n2.assignment else set()
    assert sorted(got_a | got_b | got_n) == list(range(6)) and len(got_a) + len(got_b) + len(got_n) == 6
    assert len(got_n) == 2
    # A classic member commits with its generation (= member epoch), with any OffsetCommit version.
    assert h.commit({("t", min(got_a)): 20}, a, gen_a) == {("t", min(got_a)): E.none}
    assert h.commit({("t", min(got_a)): 21}, a, gen_a - 1) == {("t", min(got_a)): E.illegal_generation}

    # The consumer-protocol member leaves: the group is classic again, with a and b, and rebalances.
    h.shard.consumer_group_heartbeat(h.now, HeartbeatRequest("g", "n", -1), TOPICS)
    assert types(h) == {"g": "classic"}
    assert h.state() == "PreparingRebalance" and set(h.shard.groups["g"].members) == {a, b}
    deferred = h.shard.take_deferred()
    keys = [rec.decode_key(r.key) for r in deferred.records]
    # The consumer group's tombstones first (its epoch's last of them), then the classic group.
    assert keys[-1] == rec.GroupMetadataKey("g") and deferred.records[-1].value is not None
    assert all(isinstance(k, rec.ConsumerGroupKey) and r.value is None for k, r in zip(keys[:-1], deferred.records[:-1], strict=True))
    assert keys[-2] == rec.ConsumerGroupKey(rec.CONSUMER_GROUP_METADATA, "g", None)
    h.apply(deferred)
    toks = [h.join(m, protocols=[("cooperative-sticky", subscription_v1(("t",), {}))]) for m in (a, b)]
    results = [h.join_result(t) for t in toks]
    assert all(r.error is E.none for r in results) and results[0].generation_id == h.generation()
    assert h.committed()[("t", min(got_a))] == 20
    assert h.committed() == {**{("t", p): 10 for p in range(6)}, ("t", min(got_a)): 20}


def test_the_last_consumer_member_expiring_downgrades_too() -> None:
    h = Harness(TOPICS, consumer_session_timeout_ms=3000)
    a, b, gen = classic_group(h)
    cg_join(h, "n")
    for _ in range(8):  # a and b keep their sessions; n says nothing
        h.advance(500)
        h.heartbeat(a, gen)
        h.heartbeat(b, gen)
    assert types(h) == {"g": "classic"} and set(h.shard.groups["g"].members) == {a, b}
    assert h.state() == "PreparingRebalance"


def test_a_classic_member_joins_a_consumer_group() -> None:
    h = Harness(TOPICS)
    n = cg_join(h, "n")
    assert set(n.assignment[T]) == set(range(6))
    first = h.join_result(h.join(require_known=True))
    assert first.error is E.member_id_required
    c = first.member_id
    gen_c, got_c = rejoin(h, c, set())
    assert got_c == set()  # n still holds its share
    assert h.heartbeat(c, gen_c) is E.none  # waiting on n: nothing to rejoin for yet
    n2 = cg_beat(h, "n", n.member_epoch, set(range(6)))
    n3 = cg_beat(h, "n", n2.member_epoch, set(n2.assignment[T]))
    assert len(n3.assignment[T] if n3.assignment else n2.assignment[T]) == 3
    assert h.heartbeat(c, gen_c) is E.rebalance_in_progress  # its partitions are free now
    gen_c, got_c = rejoin(h, c, set())
    assert len(got_c) == 3 and h.heartbeat(c, gen_c) is E.none
    d = h.shard.describe_consumer_group("g")
    assert {m.member_id: m.uses_classic_protocol for m in d.members} == {"n": False, c: True}
    # A classic member that leaves is removed; wrong ids are refused.
    assert h.heartbeat("stranger", gen_c) is E.unknown_member_id
    assert h.heartbeat(c, gen_c + 5) is E.illegal_generation
    left = h.leave(c)
    assert left.members[0][1] is E.none and c not in h.shard.consumer_groups["g"].members
    assert h.leave("n").members[0][1] is E.unknown_member_id  # not a classic member


def test_a_silent_classic_member_of_a_consumer_group_expires() -> None:
    h = Harness(TOPICS)
    cg_join(h, "n")
    c = h.join_result(h.join(session=6000)).member_id
    assert c in h.shard.consumer_groups["g"].members
    h.advance(7000)
    assert c not in h.shard.consumer_groups["g"].members


@pytest.mark.parametrize("policy", ["disabled", "DOWNGRADE"])
def test_a_policy_without_upgrade_keeps_the_classic_group(policy: str) -> None:
    h = Harness(TOPICS, consumer_migration_policy=policy.lower())
    a, _b, gen = classic_group(h)
    with pytest.raises(HeartbeatError) as info:
        cg_join(h, "n")
    assert info.value.error is E.group_id_not_found and "disabled" in info.value.message
    assert types(h) == {"g": "classic"} and h.heartbeat(a, gen) is E.none


@pytest.mark.parametrize("policy", ["disabled", "upgrade"])
def test_a_policy_without_downgrade_keeps_the_consumer_group(policy: str) -> None:
    h = Harness(TOPICS, consumer_migration_policy=policy)
    cg_join(h, "n")
    c = h.join_result(h.join()).member_id
    h.shard.consumer_group_heartbeat(h.now, HeartbeatRequest("g", "n", -1), TOPICS)
    assert types(h) == {"g": "consumer"}
    assert set(h.shard.consumer_groups["g"].members) == {c}


def test_a_classic_group_of_another_protocol_type_is_not_upgraded() -> None:
    h = Harness(TOPICS)
    h.form_group(1, protocol_type="connect", protocols=[("default", b"x")])
    with pytest.raises(HeartbeatError) as info:
        cg_join(h, "n")
    assert info.value.error is E.group_id_not_found and "embedded protocol" in info.value.message
