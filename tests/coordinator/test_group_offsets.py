"""Committed offsets in the pure coordinator: commit checks, fetch, delete, retention, replay."""

from __future__ import annotations

from group_harness import Harness

from strom.coordinator import records as rec
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E


def test_simple_consumer_commit_creates_empty_group() -> None:
    h = Harness()
    assert h.commit({("t", 0): 10, ("t", 1): 20}, metadata="m") == {("t", 0): E.none, ("t", 1): E.none}
    assert h.state() == "Empty"
    fetched = h.shard.fetch_offsets("g", [("t", 0), ("t", 2)])
    assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [(10, 5, "m"), (-1, -1, "")]
    assert h.committed() == {("t", 0): 10, ("t", 1): 20}  # all partitions when none named


def test_fetch_unknown_group() -> None:
    h = Harness()
    assert h.committed("nope", [("t", 0)]) == {("t", 0): -1}
    assert h.committed("nope") == {}


def test_commit_by_member_checks_generation_and_member() -> None:
    h = Harness()
    a, b = h.form_group(2)
    assert h.commit({("t", 0): 1}, member_id=a, generation=1) == {("t", 0): E.none}
    assert h.commit({("t", 0): 2}, member_id=a, generation=0) == {("t", 0): E.illegal_generation}
    assert h.commit({("t", 0): 2}, member_id="x", generation=1) == {("t", 0): E.unknown_member_id}
    # a non-member cannot commit to a group with members
    assert h.commit({("t", 0): 2}) == {("t", 0): E.unknown_member_id}
    assert h.commit({("t", 0): 2}, group="fresh", member_id="m", generation=3) == {("t", 0): E.illegal_generation}
    assert h.committed() == {("t", 0): 1}


def test_commit_during_rebalance() -> None:
    h = Harness()
    a, b = h.form_group(2)
    h.join(member_id=b, topics=("t", "u"))  # PreparingRebalance: commits still allowed
    assert h.commit({("t", 0): 3}, member_id=a, generation=1) == {("t", 0): E.none}
    h.join(member_id=a)  # CompletingRebalance for generation 2
    assert h.commit({("t", 0): 4}, member_id=a, generation=2) == {("t", 0): E.rebalance_in_progress}
    assert h.committed() == {("t", 0): 3}


def test_commit_metadata_too_large_only_fails_that_partition() -> None:
    h = Harness(offset_metadata_max_bytes=10)
    tok = h.token("c")
    from strom.coordinator.api import OffsetCommitPartition, OffsetCommitRequestData
    parts = [OffsetCommitPartition("t", 0, 1, -1, "x" * 11), OffsetCommitPartition("t", 1, 2, -1, None)]
    h.apply(h.shard.commit_offsets(h.now, tok, OffsetCommitRequestData("g", "", None, -1, parts)))
    assert [r.error for r in h.answer(tok)] == [E.offset_metadata_too_large, E.none]
    assert h.shard.fetch_offsets("g", [("t", 1)])[0].metadata == ""


def test_failed_append_answers_error_and_commits_nothing() -> None:
    h = Harness()
    h.fail_next_append = True
    assert h.commit({("t", 0): 1}) == {("t", 0): E.coordinator_not_available}
    assert h.committed("g", [("t", 0)]) == {("t", 0): -1}


def test_commit_extends_session() -> None:
    h = Harness()
    a, = h.form_group(1, session=6000)
    for _ in range(5):
        h.advance(4000)
        assert h.commit({("t", 0): 1}, member_id=a, generation=1) == {("t", 0): E.none}
    assert h.state() == "Stable"


def test_delete_groups() -> None:
    h = Harness()
    h.form_group(1, group="busy")
    h.commit({("t", 0): 1}, group="idle")
    tok = h.token("del")
    h.apply(h.shard.delete_groups(h.now, tok, ["busy", "idle", "nope"]))
    assert dict(h.answer(tok)) == {"busy": E.non_empty_group, "idle": E.none, "nope": E.group_id_not_found}
    assert "idle" not in h.shard.groups
    tomb = h.records[-1]
    assert tomb.value is None and rec.decode_key(tomb.key) == rec.OffsetCommitKey("idle", "t", 0)


def test_delete_group_after_members_left_writes_group_tombstone() -> None:
    h = Harness()
    a, = h.form_group(1)
    h.commit({("t", 0): 1}, member_id=a, generation=1)
    h.leave(a)
    tok = h.token("del")
    n = len(h.records)
    h.apply(h.shard.delete_groups(h.now, tok, ["g"]))
    keys = [(rec.decode_key(r.key), r.value) for r in h.records[n:]]
    assert keys == [(rec.OffsetCommitKey("g", "t", 0), None), (rec.GroupMetadataKey("g"), None)]


def test_offset_delete() -> None:
    h = Harness()
    a, = h.form_group(1, topics=("t",))
    h.commit({("t", 0): 1, ("old", 0): 7}, member_id=a, generation=1)
    tok = h.token("od")
    h.apply(h.shard.delete_offsets(h.now, tok, "g", [("t", 0), ("old", 0)]))
    error, parts = h.answer(tok)
    assert error is E.none
    assert {(p.topic, p.error) for p in parts} == {("t", E.group_subscribed_to_topic), ("old", E.none)}
    assert h.committed() == {("t", 0): 1}
    tok = h.token("od2")
    h.apply(h.shard.delete_offsets(h.now, tok, "missing", [("t", 0)]))
    assert h.answer(tok)[0] is E.group_id_not_found


def test_offsets_of_empty_group_expire_after_retention() -> None:
    day = 24 * 3600 * 1000
    h = Harness(offsets_retention_ms=7 * day, offsets_retention_check_interval_ms=600_000)
    h.shard.loaded(h.now)
    a, = h.form_group(1)
    h.commit({("t", 0): 1}, member_id=a, generation=1)
    h.advance(8 * day)  # stable group: offsets of subscribed topics never expire
    h.heartbeat(a, 1)
    assert h.committed() == {("t", 0): 1}
    h.leave(a)  # Empty from now
    h.advance(7 * day - 600_000)
    assert h.committed() == {("t", 0): 1}
    h.advance(600_000)
    assert h.committed() == {}
    assert "g" not in h.shard.groups
    assert [(rec.decode_key(r.key), r.value) for r in h.records[-2:]] == [
        (rec.OffsetCommitKey("g", "t", 0), None), (rec.GroupMetadataKey("g"), None)]


def test_simple_consumer_offsets_expire_each_from_its_commit() -> None:
    h = Harness(offsets_retention_ms=10_000, offsets_retention_check_interval_ms=1000)
    h.shard.loaded(h.now)
    h.commit({("t", 0): 1})
    h.advance(5000)
    h.commit({("t", 1): 1})
    h.advance(5000)
    assert h.committed() == {("t", 1): 1}
    h.advance(5000)
    assert "g" not in h.shard.groups


def test_replay_rebuilds_groups_and_offsets() -> None:
    h = Harness()
    a, b = h.form_group(2, group="live")
    h.commit({("t", 0): 11, ("t", 1): 22}, member_id=a, generation=1, group="live", metadata="meta")
    h.commit({("t", 0): 5}, group="simple")
    h.commit({("t", 0): 6}, group="simple")
    h.commit({("t", 0): 9}, group="gone")
    tok = h.token("del")
    h.apply(h.shard.delete_groups(h.now, tok, ["gone"]))

    fresh = GroupCoordinatorShard(h.shard.config)
    for r in h.records:
        fresh.replay(r.key, r.value, h.now)
    fresh.loaded(h.now)
    assert set(fresh.groups) == {"live", "simple"}
    live = fresh.groups["live"]
    assert live.state.value == "Stable" and live.generation_id == 1 and set(live.members) == {a, b}
    assert live.members[a].assignment == f"assignment-{a}".encode()
    assert fresh.fetch_offsets("live", [("t", 1)])[0].metadata == "meta"
    assert fresh.fetch_offsets("simple", [("t", 0)])[0].offset == 6
    # loaded members resume heartbeating with their generation
    assert fresh.heartbeat(h.now + 1000, "live", a, None, 1) is E.none
    # ... and members that do not come back are expired by their session timeout
    res = fresh.tick(h.now + 10_000)
    assert not res.replies and fresh.groups["live"].state.value == "PreparingRebalance"


def test_replay_group_tombstone_keeps_offsets() -> None:
    shard = GroupCoordinatorShard(Harness().shard.config)
    key = rec.encode_group_metadata_key(rec.GroupMetadataKey("g"))
    value = rec.encode_group_metadata_value(rec.GroupMetadataValue("consumer", 4, None, None, 123))
    okey = rec.encode_offset_commit_key(rec.OffsetCommitKey("g", "t", 0))
    shard.replay(key, value, 0)
    shard.replay(okey, rec.encode_offset_commit_value(rec.OffsetCommitValue(3, -1, "", 1)), 0)
    shard.replay(key, None, 0)
    assert shard.fetch_offsets("g", None)[0].offset == 3
    shard.replay(okey, None, 0)
    assert "g" not in shard.groups
