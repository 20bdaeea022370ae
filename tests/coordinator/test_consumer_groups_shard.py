"""Consumer-protocol groups in the group coordinator shard (coordinator/consumer_groups.py): expiry
through the shard's timers, one type per group id, and member epochs on offset commits and fetches."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.api import JoinGroupRequestData, OffsetCommitPartition, OffsetCommitRequestData
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import HeartbeatError, HeartbeatRequest, HeartbeatResponse, TopicImage
from strom.coordinator.group import ClassicGroup, GroupState
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E

ORDERS = uuid.UUID(int=7)
TOPICS = {"orders": TopicImage(ORDERS, 6)}
CONFIG = GroupConfig(consumer_session_timeout_ms=3000, consumer_heartbeat_interval_ms=500)


def join(shard: GroupCoordinatorShard, now: int, member: str, group: str = "g") -> HeartbeatResponse:
    return shard.consumer_group_heartbeat(now, HeartbeatRequest(
        group, member, 0, rebalance_timeout_ms=10000, subscribed_topic_names=("orders",), owned={}), TOPICS)


def beat(shard: GroupCoordinatorShard, now: int, member: str, epoch: int, owned: dict[uuid.UUID, frozenset[int]],
         group: str = "g") -> HeartbeatResponse:
    return shard.consumer_group_heartbeat(now, HeartbeatRequest(group, member, epoch, owned=owned), TOPICS)


def parts(resp: HeartbeatResponse) -> set[int]:
    assert resp.assignment is not None
    return set(resp.assignment.get(ORDERS, frozenset()))


def commit(shard: GroupCoordinatorShard, member: str, epoch: int, offset: int = 5, group: str = "g",
           version: int = 9) -> list[E]:
    token = object()
    res = shard.commit_offsets(0, token, OffsetCommitRequestData(
        group, member, None, epoch, [OffsetCommitPartition("orders", 0, offset)], version))
    for r in res.records:
        if r.replay:
            shard.replay(r.key, r.value, 0)
    ((tok, answer),) = res.replies
    assert tok is token
    return [p.error for p in answer]


def test_settings_come_from_the_broker_config() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    assert join(shard, 0, "a").heartbeat_interval_ms == 500
    assert shard.timers.deadline(("consumer-member", "g", "a")) == 3000


def test_a_silent_member_expires_on_the_timer_and_its_partitions_go_to_the_other() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    a = join(shard, 0, "a")
    assert parts(a) == set(range(6))
    b = join(shard, 100, "b")
    a2 = beat(shard, 200, "a", a.member_epoch, {ORDERS: frozenset(range(6))})
    kept = parts(a2)
    a3 = beat(shard, 300, "a", a2.member_epoch, {ORDERS: frozenset(kept)})
    b2 = beat(shard, 300, "b", b.member_epoch, {})
    assert len(kept) == 3 and parts(b2) == set(range(6)) - kept
    # a goes silent; b keeps heartbeating with what it owns.
    b_owned, b_epoch, now = parts(b2), b2.member_epoch, 300
    while now < 5000:
        now += 500
        r = beat(shard, now, "b", b_epoch, {ORDERS: frozenset(b_owned)})
        b_epoch = r.member_epoch
        if r.assignment is not None:
            b_owned = parts(r)
        shard.tick(now)
    assert "a" not in shard.consumer_groups["g"].members
    assert b_owned == set(range(6))
    with pytest.raises(HeartbeatError) as info:
        beat(shard, now + 2, "a", a3.member_epoch, {ORDERS: frozenset(kept)})
    assert info.value.error is E.unknown_member_id


def test_a_heartbeating_member_is_not_expired() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    r = join(shard, 0, "a")
    for now in range(1000, 10000, 1000):
        r = beat(shard, now, "a", r.member_epoch, {ORDERS: frozenset(range(6))})
        shard.tick(now)
    assert "a" in shard.consumer_groups["g"].members


def test_one_type_per_group_id() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    classic = shard.groups["c"] = ClassicGroup("c")
    classic.transition_to(GroupState.PREPARING_REBALANCE, 0)
    with pytest.raises(HeartbeatError) as info:
        join(shard, 0, "a", group="c")
    assert info.value.error is E.group_id_not_found
    # An empty classic group (offsets only) becomes a consumer group, its offsets kept.
    assert commit(shard, "", -1, 3, group="o") == [E.none]
    join(shard, 0, "a", group="o")
    assert shard.fetch_offsets("o", [("orders", 0)])[0].offset == 3
    # Classic requests for a consumer group with members are the consumer group's (online
    # migration, coordinator/test_migration.py): a stranger is unknown, no protocol is inconsistent.
    token = object()
    res = shard.join_group(0, token, JoinGroupRequestData("o", "", None, "c", "h", 10000, 10000, "consumer", []))
    assert res.replies[0][1].error is E.inconsistent_group_protocol
    assert shard.heartbeat(0, "o", "x", None, 1) is E.unknown_member_id
    assert [(g.group_id, g.group_type, g.protocol_type) for g in shard.list_groups() if g.group_id == "o"] == [
        ("o", "consumer", "consumer")]


def test_commits_and_fetches_carry_the_member_epoch() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    r = join(shard, 0, "a")
    assert commit(shard, "a", r.member_epoch, 5) == [E.none]
    assert commit(shard, "a", r.member_epoch - 1, 9) == [E.stale_member_epoch]
    assert commit(shard, "b", r.member_epoch, 9) == [E.unknown_member_id]
    assert commit(shard, "", -1, 9) == [E.unknown_member_id]  # the group has members
    # A member's commit at a version without the member epoch (before v9): Kafka's UNSUPPORTED_VERSION.
    assert commit(shard, "a", r.member_epoch, 9, version=8) == [E.unsupported_version]
    assert shard.fetch_offsets("g", [("orders", 0)])[0].offset == 5
    assert shard.validate_offset_fetch("g", "a", r.member_epoch) is E.none
    assert shard.validate_offset_fetch("g", None, -1) is E.none
    assert shard.validate_offset_fetch("g", "a", r.member_epoch + 1) is E.stale_member_epoch
    assert shard.validate_offset_fetch("g", "b", r.member_epoch) is E.unknown_member_id
    shard.consumer_group_heartbeat(0, HeartbeatRequest("g", "a", -1), TOPICS)
    assert commit(shard, "", -1, 11) == [E.none]  # empty now: admin tools may commit
    assert shard.fetch_offsets("g", [("orders", 0)])[0].offset == 11
