"""The share groups' pure parts (KIP-932): the SharePartition state machine (a model-based
hypothesis test against a plain dict of offsets), share sessions' epoch rules, the share group's
SimpleAssignor and its records, and the share coordinator's records and merge."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from strom.coordinator import share_records as srec
from strom.coordinator import share_state_records as ssr
from strom.coordinator.consumer_group import TopicImage
from strom.coordinator.share_coordinator import ShareCoordinatorShard
from strom.coordinator.share_group import (
    ShareGroup,
    ShareGroupSettings,
    ShareHeartbeatError,
    ShareHeartbeatRequest,
)
from strom.coordinator.share_state_records import PersistedBatch, SharePartitionKey
from strom.protocol.errors import ErrorCode as E
from strom.share.share_partition import (
    InvalidRecordState,
    LogBatch,
    RecordState,
    SharePartition,
    SharePartitionSettings,
)
from strom.share.share_session import ShareSessionCache, ShareSessionError

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK = 1000


def batches(first: int, last: int, size: int = 1) -> list[LogBatch]:
    return [LogBatch(o, min(o + size - 1, last)) for o in range(first, last + 1, size)]


def test_records_go_to_one_member_at_a_time_and_accepted_ones_never_again() -> None:
    sp = SharePartition(0, SharePartitionSettings())
    a = sp.acquire("a", batches(0, 9), 4, LOCK, now=0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in a] == [(0, 3, 1)]
    b = sp.acquire("b", batches(sp.next_fetch_offset(), 9), 100, LOCK, now=0)
    assert [(r.first_offset, r.last_offset) for r in b] == [(4, 9)]
    assert sp.acquire("c", batches(sp.next_fetch_offset(), 9), 100, LOCK, now=0) == []
    sp.acknowledge("a", 0, 3, [ACCEPT])
    assert sp.start_offset == 4  # 0-3 are done
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 4, 4, [ACCEPT])  # b holds it
    sp.acknowledge("b", 4, 9, [ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT, ACCEPT])
    assert sp.next_fetch_offset() == 5
    again = sp.acquire("c", batches(5, 9), 100, LOCK, now=0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again] == [(5, 5, 2)]
    sp.acknowledge("c", 5, 5, [ACCEPT])
    assert sp.start_offset == sp.end_offset == 10 and not sp.records


def test_a_refused_write_rolls_back_and_the_records_are_delivered_again() -> None:
    sp = SharePartition(0, SharePartitionSettings(delivery_count_limit=3))
    sp.acquire("a", batches(0, 4), 100, LOCK, now=0)
    accept = sp.begin_acknowledge("a", 0, 2, [ACCEPT])
    # Pending: not done yet (the start stays), not acknowledgeable again; the write carries them.
    assert sp.start_offset == 0 and sp.start_after(accept) == 3
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in accept.batches()] == [(0, 2, 2)]
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 1, 1, [ACCEPT])
    assert sp.state_batches()[0].delivery_state == RecordState.AVAILABLE  # what is written stays committed
    release = sp.begin_acknowledge("a", 3, 4, [RELEASE])
    # A pending RELEASE is not handed out before its write.
    assert sp.acquire("b", batches(sp.next_fetch_offset(), 4), 100, LOCK, now=0) == []
    assert sp.complete(accept, False, now=10) == 0  # refused: "a" holds 0-2 again, under its lock
    assert sp.start_offset == 0 and sp.acquired_by("a") == [0, 1, 2]
    assert sp.complete(release, False, now=LOCK) == 2  # refused after the lock ran out: available
    again = sp.acquire("b", batches(sp.next_fetch_offset(), 4), 100, LOCK, now=LOCK)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again] == [(3, 4, 2)]
    assert sp.expire_locks(LOCK) == 3  # 0-2 come back when a's lock runs out, and are delivered again
    again = sp.acquire("b", batches(sp.next_fetch_offset(), 4), 100, LOCK, now=LOCK)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again] == [(0, 2, 2)]
    # Written: the states stay and the start moves.
    done = sp.begin_acknowledge("b", 0, 4, [ACCEPT])
    sp.complete(done, True, now=LOCK)
    assert sp.start_offset == 5 and not sp.records


def test_lock_expiry_and_delivery_limit() -> None:
    sp = SharePartition(0, SharePartitionSettings(delivery_count_limit=2))
    sp.acquire("a", batches(0, 0), 10, LOCK, now=0)
    assert sp.expire_locks(LOCK - 1) == 0  # not before the lock runs out
    assert sp.expire_locks(LOCK) == 1
    assert sp.records[0].state is RecordState.AVAILABLE
    [r] = sp.acquire("b", batches(0, 0), 10, LOCK, now=LOCK)
    assert r.delivery_count == 2
    assert sp.release_member("b") == 1
    # Delivered twice with a limit of 2: archived, never offered again.
    assert sp.start_offset == 1 and sp.acquire("c", batches(0, 0), 10, LOCK, now=LOCK) == []


def test_window_bounds_what_is_in_flight() -> None:
    sp = SharePartition(0, SharePartitionSettings(max_record_locks=100))
    got = sp.acquire("a", batches(0, 499, 50), 1000, LOCK, now=0)
    assert got[-1].last_offset == 99 and sp.end_offset == 100 and not sp.can_acquire()
    sp.acknowledge("a", 0, 49, [ACCEPT])
    assert sp.can_acquire()
    more = sp.acquire("a", batches(100, 499, 50), 1000, LOCK, now=0)
    assert (more[0].first_offset, more[-1].last_offset) == (100, 149)


def test_control_batches_and_gaps_are_never_delivered() -> None:
    sp = SharePartition(0, SharePartitionSettings())
    got = sp.acquire("a", [LogBatch(0, 1), LogBatch(2, 2, is_control=True), LogBatch(5, 6)], 100, LOCK, now=0)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 1), (5, 6)]
    sp.acknowledge("a", 0, 6, [ACCEPT, ACCEPT, 0, 0, 0, ACCEPT, ACCEPT])
    assert sp.start_offset == 7 and not sp.records


def test_persisted_state_restores_what_was_not_finished() -> None:
    settings_ = SharePartitionSettings()
    sp = SharePartition(10, settings_)
    sp.acquire("a", batches(10, 19), 100, LOCK, now=0)
    sp.acknowledge("a", 12, 13, [ACCEPT])
    sp.acknowledge("a", 14, 14, [REJECT])
    restored = SharePartition(sp.start_offset, settings_, sp.state_batches())
    # In flight come back available (with their delivery counts); acknowledged stay done.
    assert restored.next_fetch_offset() == 10
    got = restored.acquire("b", batches(10, 19), 100, LOCK, now=0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(10, 11, 2), (15, 19, 2)]


class SharePartitionModel(RuleBasedStateMachine):
    """Random acquisitions, acknowledgements, expiries and departures against a dict model: an
    acknowledged or archived record is never acquired again, a record is held by one member at a
    time, the delivery limit holds, and the persisted state says the same as the live one."""

    LIMIT, LOCKS, LOG_END = 3, 20, 60

    def __init__(self) -> None:
        super().__init__()
        self.sp = SharePartition(0, SharePartitionSettings(self.LIMIT, self.LOCKS))
        self.now = 0
        self.done: set[int] = set()
        self.held: dict[int, str] = {}
        self.count: dict[int, int] = {}

    @rule(member=st.sampled_from("abc"), n=st.integers(1, 15), size=st.integers(1, 5))
    def acquire(self, member: str, n: int, size: int) -> None:
        start = self.sp.next_fetch_offset()
        got = self.sp.acquire(member, batches(start, self.LOG_END - 1, size), n, 100, self.now)
        for r in got:
            for o in range(r.first_offset, r.last_offset + 1):
                assert o not in self.done and o not in self.held
                self.count[o] = self.count.get(o, 0) + 1
                assert r.delivery_count == self.count[o] <= self.LIMIT
                self.held[o] = member
        assert sum(r.last_offset - r.first_offset + 1 for r in got) <= n

    @rule(data=st.data(), kind=st.sampled_from([ACCEPT, RELEASE, REJECT]))
    def acknowledge(self, data: st.DataObject, kind: int) -> None:
        if not self.held:
            return
        offset = data.draw(st.sampled_from(sorted(self.held)))
        member = self.held[offset]
        wrong = data.draw(st.booleans())
        if wrong:
            with pytest.raises(InvalidRecordState):
                self.sp.acknowledge(member + "x", offset, offset, [kind])
            return
        self.sp.acknowledge(member, offset, offset, [kind])
        del self.held[offset]
        if kind != RELEASE or self.count[offset] >= self.LIMIT:
            self.done.add(offset)

    @rule(dt=st.integers(0, 150))
    def tick(self, dt: int) -> None:
        self.now += dt
        self.sp.expire_locks(self.now)
        assert all(r.lock_deadline > self.now for r in self.sp.records.values() if r.state is RecordState.ACQUIRED)
        for o in [o for o in self.held if self.sp.records.get(o) is None
                  or self.sp.records[o].state is not RecordState.ACQUIRED]:
            del self.held[o]
            if self.count[o] >= self.LIMIT:
                self.done.add(o)

    @rule(member=st.sampled_from("abc"))
    def leave(self, member: str) -> None:
        self.sp.release_member(member)
        for o in [o for o, m in self.held.items() if m == member]:
            del self.held[o]
            if self.count[o] >= self.LIMIT:
                self.done.add(o)

    @invariant()
    def agrees(self) -> None:
        sp = self.sp
        assert sp.start_offset <= sp.end_offset and sp.end_offset - sp.start_offset <= self.LOCKS
        for o, r in sp.records.items():
            assert sp.start_offset <= o < sp.end_offset
            if r.state is RecordState.ACQUIRED:
                assert self.held.get(o) == r.member_id
            elif r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                assert o in self.done
            else:
                assert o not in self.done and o not in self.held
        assert all(o < sp.start_offset or o in sp.records for o in self.held)
        # What a restart would read back: the same, with acquired records available again.
        restored = SharePartition(sp.start_offset, sp.settings, sp.state_batches())
        assert {o: (r.state if r.state is not RecordState.ACQUIRED else RecordState.AVAILABLE, r.delivery_count)
                for o, r in sp.records.items()} == {o: (r.state, r.delivery_count)
                                                   for o, r in restored.records.items()}


TestSharePartitionModel = SharePartitionModel.TestCase
TestSharePartitionModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])


# --- share sessions -------------------------------------------------------------------------------

def test_share_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=2)
    t = uuid.uuid4()
    session, _ = cache.open("g", "m", 1, [(t, 0)])
    assert session.epoch == 1
    with pytest.raises(ShareSessionError) as e:
        cache.check("g", "m", 2)
    assert e.value.error is E.invalid_share_session_epoch
    cache.advance(cache.check("g", "m", 1), [(t, 1)], [(t, 0)])
    assert session.epoch == 2 and list(session.partitions) == [(t, 1)]
    with pytest.raises(ShareSessionError) as e:
        cache.check("g", "other", 1)
    assert e.value.error is E.share_session_not_found
    cache.open("g", "m2", 1, [])
    with pytest.raises(ShareSessionError) as e:
        cache.open("g", "m3", 2, [])
    assert e.value.error is E.share_session_limit_reached
    assert [s.member_id for s in cache.close_connection(1)] == ["m", "m2"]


# --- the share group ------------------------------------------------------------------------------

def test_every_member_gets_every_partition_and_the_records_round_trip() -> None:
    topic = TopicImage(uuid.uuid4(), 3)
    topics = {"t": topic}
    group = ShareGroup("g")
    s = ShareGroupSettings(heartbeat_interval_ms=100, session_timeout_ms=1000)
    for m in ("m1", "m2", "m3"):
        r = group.heartbeat(ShareHeartbeatRequest("g", m, 0, None, ("t",)), topics, s, now=0)
        assert r.assignment == {topic.topic_id: frozenset({0, 1, 2})}
    # After the others joined, m1 moves to the new epoch with the same partitions.
    r = group.heartbeat(ShareHeartbeatRequest("g", "m1", 1), topics, s, now=10)
    assert r.member_epoch == group.group_epoch == 3 and r.assignment is None
    with pytest.raises(ShareHeartbeatError) as e:
        group.heartbeat(ShareHeartbeatRequest("g", "m1", 7), topics, s, now=10)
    assert e.value.error is E.fenced_member_epoch
    assert group.expired(1001) == ["m2", "m3"]
    groups = {"g": group}
    log = srec.ShareGroupLog(groups)
    written = log.records("g")
    replayed: dict[str, ShareGroup] = {}
    for rec in written:
        key = srec.decode_key(rec.key)
        assert key is not None
        srec.replay(replayed, *key, rec.value)
    back = replayed["g"]
    assert back.group_epoch == group.group_epoch and back.target_epoch == group.target_epoch
    assert {m: (x.member_epoch, x.assigned, x.subscribed_topic_names) for m, x in back.members.items()} == \
        {m: (x.member_epoch, x.assigned, x.subscribed_topic_names) for m, x in group.members.items()}
    assert log.records("g") == []  # nothing changed since
    group.remove_member("m2")
    gone = log.records("g")
    types = [int.from_bytes(r.key[:2], "big") for r in gone if r.value is None]
    assert types == [srec.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, srec.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                     srec.SHARE_GROUP_MEMBER_METADATA]


# --- the share coordinator ------------------------------------------------------------------------

def test_share_state_records_round_trip_and_merge() -> None:
    key = SharePartitionKey("g", uuid.uuid4(), 3)
    shard = ShareCoordinatorShard(updates_per_snapshot=2)
    replayed = ShareCoordinatorShard()
    states = [(0, [PersistedBatch(0, 9, 0, 1)]), (5, [PersistedBatch(5, 6, 2, 1), PersistedBatch(8, 8, 0, 2)]),
              (7, []), (7, [PersistedBatch(9, 12, 4, 3)])]
    kinds = []
    for start, batches_ in states:
        write = shard.write(key, 0, start, batches_, now=1)
        assert not isinstance(write, E)
        shard.written(write)
        record_type, decoded_key = ssr.decode_key(write.key)
        kinds.append(record_type)
        assert decoded_key == key
        replayed.replay(record_type, key, ssr.decode_value(record_type, write.value))
    assert kinds == [ssr.SHARE_SNAPSHOT, ssr.SHARE_UPDATE, ssr.SHARE_UPDATE, ssr.SHARE_SNAPSHOT]
    state, back = shard.read(key), replayed.read(key)
    assert state is not None and back is not None
    assert (state.start_offset, state.batches) == (back.start_offset, back.batches)
    assert state.start_offset == 7
    assert state.batches == (PersistedBatch(7, 7, 0, 1), PersistedBatch(8, 8, 0, 2), PersistedBatch(9, 12, 4, 3))
    assert shard.write(key, -1, 7, [], now=2) is E.fenced_leader_epoch  # an older leader
    assert key.coordinator_key().startswith("g:") and key.coordinator_key().endswith(":3")
