"""A consumer-protocol group's records in __consumer_offsets (KIP-848): Kafka 4's bytes for every key
and value, round trips, and a shard that replays what another shard wrote into an equal group."""

from __future__ import annotations

import struct
import uuid

from hypothesis import given
from hypothesis import strategies as st

from strom.coordinator import consumer_records as cr
from strom.coordinator import records as rec
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import ConsumerGroup, HeartbeatError, HeartbeatRequest, TopicImage
from strom.coordinator.result import Record
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E

U1 = uuid.UUID(int=1)
U1_BYTES = b"\x00" * 15 + b"\x01"


# ---------------------------------------------------------------- keys and values, byte for byte


def test_keys_bytes() -> None:
    cases = [
        (rec.ConsumerGroupKey(3, "g"), b"\x00\x03\x00\x01g"),
        (rec.ConsumerGroupKey(4, "g"), b"\x00\x04\x00\x01g"),
        (rec.ConsumerGroupKey(5, "g", "m"), b"\x00\x05\x00\x01g\x00\x01m"),
        (rec.ConsumerGroupKey(6, "g"), b"\x00\x06\x00\x01g"),
        (rec.ConsumerGroupKey(7, "g", "m"), b"\x00\x07\x00\x01g\x00\x01m"),
        (rec.ConsumerGroupKey(8, "g", "m"), b"\x00\x08\x00\x01g\x00\x01m"),
        (rec.ConsumerGroupKey(16, "g", "t.*"), b"\x00\x10\x00\x01g\x00\x03t.*"),
    ]
    for key, data in cases:
        assert rec.encode_consumer_group_key(key) == data
        assert rec.decode_key(data) == key


def _i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


VALUES: list[tuple[int, cr.ConsumerGroupValue, bytes]] = [
    (3, cr.ConsumerGroupMetadataValue(5), b"\x00\x00" + _i32(5) + b"\x00"),
    (4, cr.ConsumerGroupPartitionMetadataValue((cr.TopicMetadata(U1, "t", 3),)),
     # version, 1 topic: id, name, partitions, no partition racks, its tags; the value's tags
     b"\x00\x00" + b"\x02" + U1_BYTES + b"\x02t" + _i32(3) + b"\x01" + b"\x00" + b"\x00"),
    (5, cr.ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, 1000, "uniform"),
     b"\x00\x00" + b"\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x00" + _i32(1000)
     + b"\x08uniform" + b"\x00"),
    (5, cr.ConsumerGroupMemberMetadataValue("i-1", "r", "c", "/h", (), "t.*", 30000, None),
     b"\x00\x00" + b"\x04i-1" + b"\x02r" + b"\x02c" + b"\x03/h" + b"\x01" + b"\x04t.*" + _i32(30000)
     + b"\x00" + b"\x00"),
    # A classic member of a consumer group: tagged field 0 (16 bytes): session timeout, one
    # protocol (name, metadata, its tags), the struct's tags.
    (5, cr.ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, 1000, None,
                                            cr.ClassicMember(45000, (("range", b"\x01\x02"),))),
     b"\x00\x00" + b"\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x00" + _i32(1000) + b"\x00"
     + b"\x01" + b"\x00" + b"\x10" + _i32(45000) + b"\x02" + b"\x06range" + b"\x03\x01\x02" + b"\x00" + b"\x00"),
    (6, cr.ConsumerGroupTargetAssignmentMetadataValue(7), b"\x00\x00" + _i32(7) + b"\x00"),
    (7, cr.ConsumerGroupTargetAssignmentMemberValue(((U1, (0, 2)),)),
     b"\x00\x00" + b"\x02" + U1_BYTES + b"\x03" + _i32(0, 2) + b"\x00" + b"\x00"),
    (8, cr.ConsumerGroupCurrentMemberAssignmentValue(5, 4, 1, ((U1, (1,)),), ((U1, (2,)),)),
     b"\x00\x00" + _i32(5, 4) + b"\x01" + b"\x02" + U1_BYTES + b"\x02" + _i32(1) + b"\x00"
     + b"\x02" + U1_BYTES + b"\x02" + _i32(2) + b"\x00" + b"\x00"),
    (16, cr.ConsumerGroupRegularExpressionValue(("a", "b"), 3, 1000),
     b"\x00\x00" + b"\x03\x02a\x02b" + struct.pack(">qq", 3, 1000) + b"\x00"),
]


def test_values_bytes() -> None:
    for record_type, value, data in VALUES:
        assert cr.encode_value(value) == data, value
        assert cr.decode_value(record_type, data) == value


def test_tagged_fields_of_later_kafka_versions_are_skipped() -> None:
    # Kafka 4.1 adds MetadataHash (tag 0) to ConsumerGroupMetadataValue; 4.3 AssignmentEpochs (tag 0)
    # to each topic of the current assignment.
    with_hash = b"\x00\x00" + _i32(5) + b"\x01" + b"\x00\x08" + struct.pack(">q", 12345)
    assert cr.decode_value(3, with_hash) == cr.ConsumerGroupMetadataValue(5)
    with_epochs = (b"\x00\x00" + _i32(5, 4) + b"\x00" + b"\x02" + U1_BYTES + b"\x02" + _i32(1)
                   + b"\x01\x00\x05\x02" + _i32(5) + b"\x01" + b"\x00")
    assert cr.decode_value(8, with_epochs) == cr.ConsumerGroupCurrentMemberAssignmentValue(5, 4, 0, ((U1, (1,)),))


def test_bad_values_raise_format_error() -> None:
    for record_type, _, data in VALUES:
        for cut in range(len(data) - 1):
            try:
                cr.decode_value(record_type, data[:cut])
            except rec.RecordFormatError:
                continue
            raise AssertionError(f"type {record_type} cut at {cut} was read")
    try:
        cr.decode_value(3, b"\x00\x01" + _i32(5) + b"\x00")
    except rec.RecordFormatError as e:
        assert "version 1" in str(e)
    else:
        raise AssertionError("an unknown value version was read")


names = st.text(min_size=0, max_size=8)
partitions = st.lists(st.tuples(st.uuids(), st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)),
                      max_size=3).map(tuple)
i32s = st.integers(-(2**31), 2**31 - 1)


@given(st.one_of(
    st.builds(lambda e: (3, cr.ConsumerGroupMetadataValue(e)), i32s),
    st.builds(lambda ts: (4, cr.ConsumerGroupPartitionMetadataValue(tuple(ts))),
              st.lists(st.builds(cr.TopicMetadata, st.uuids(), names, i32s), max_size=3)),
    st.builds(lambda *f: (5, cr.ConsumerGroupMemberMetadataValue(*f)), st.none() | names, st.none() | names, names,
              names, st.lists(names, max_size=3).map(tuple), st.none() | names, i32s, st.none() | names,
              st.none() | st.builds(cr.ClassicMember, i32s,
                                    st.lists(st.tuples(names, st.binary(max_size=8)), max_size=2).map(tuple))),
    st.builds(lambda e: (6, cr.ConsumerGroupTargetAssignmentMetadataValue(e)), i32s),
    st.builds(lambda tp: (7, cr.ConsumerGroupTargetAssignmentMemberValue(tp)), partitions),
    st.builds(lambda a, b, s, x, y: (8, cr.ConsumerGroupCurrentMemberAssignmentValue(a, b, s, x, y)), i32s, i32s,
              st.sampled_from([0, 1, 2]), partitions, partitions),
    st.builds(lambda t, v, ts: (16, cr.ConsumerGroupRegularExpressionValue(t, v, ts)),
              st.lists(names, max_size=3).map(tuple), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
))
def test_values_round_trip(case: tuple[int, cr.ConsumerGroupValue]) -> None:
    record_type, value = case
    assert cr.decode_value(record_type, cr.encode_value(value)) == value


# ---------------------------------------------------------------- the shard writes, another replays

ORDERS, AUDIT, OTHER = uuid.UUID(int=7), uuid.UUID(int=8), uuid.UUID(int=9)
TOPICS = {"orders": TopicImage(ORDERS, 6), "audit.a": TopicImage(AUDIT, 2)}
CONFIG = GroupConfig(consumer_session_timeout_ms=3000, consumer_heartbeat_interval_ms=500)


class Log:
    """__consumer_offsets as a list, written the way the runtime writes it."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, records: list[Record]) -> None:
        assert all(r.group_id == "g" for r in records)
        self.records += records

    def replay_into(self, shard: GroupCoordinatorShard, now: int) -> None:
        for r in self.records:
            shard.replay(r.key, r.value, now)
        shard.loaded(now)

    def kinds(self, start: int = 0) -> list[tuple[int, str | None, bool]]:
        out = []
        for r in self.records[start:]:
            key = rec.decode_key(r.key)
            assert isinstance(key, rec.ConsumerGroupKey)
            out.append((key.record_type, key.sub, r.value is None))
        return out


def beat(shard: GroupCoordinatorShard, log: Log, now: int, member: str, epoch: int, **fields: object) -> object:
    try:
        resp: object = shard.consumer_group_heartbeat(now, HeartbeatRequest("g", member, epoch, **fields),  # type: ignore[arg-type]
                                                      TOPICS, (f"client-{member}", "/127.0.0.1"))
    except HeartbeatError as e:
        resp = e
    # As the runtime asks: only the heartbeating member's records are compared, unless the
    # membership or the target assignment changed.
    log.add(shard.consumer_group_records("g", member))
    return resp


def same_group(a: ConsumerGroup, b: ConsumerGroup) -> None:
    assert (a.group_epoch, a.target_epoch, a.target, a.subscribed_partitions, a.subscribed_names) == (
        b.group_epoch, b.target_epoch, b.target, b.subscribed_partitions, b.subscribed_names)
    assert (a.static_members, a.partition_epochs, a.resolved_regexes) == (
        b.static_members, b.partition_epochs, b.resolved_regexes)
    assert a.members.keys() == b.members.keys()
    for member_id, m in a.members.items():
        n = b.members[member_id]
        assert (m.instance_id, m.rack_id, m.rebalance_timeout_ms, m.subscribed_topic_names, m.subscribed_topic_regex,
                m.server_assignor, m.assignment, m.classic) == (
            n.instance_id, n.rack_id, n.rebalance_timeout_ms, n.subscribed_topic_names, n.subscribed_topic_regex,
            n.server_assignor, n.assignment, n.classic)


def test_a_replayed_group_equals_the_written_one() -> None:
    shard, log = GroupCoordinatorShard(CONFIG), Log()
    a = beat(shard, log, 0, "a", 0, rebalance_timeout_ms=10000, subscribed_topic_names=("orders",),
             server_assignor="range", owned={})
    b = beat(shard, log, 10, "b", 0, instance_id="static-b", rack_id="r1", rebalance_timeout_ms=20000,
             subscribed_topic_names=("orders",), subscribed_topic_regex="audit\\..*", owned={})
    # a is told to give up partitions for b; it has not yet: pending revocation is recorded too.
    assert not isinstance(a, HeartbeatError) and not isinstance(b, HeartbeatError)
    a2 = beat(shard, log, 20, "a", a.member_epoch, owned={ORDERS: frozenset(range(6))})  # type: ignore[attr-defined]
    assert shard.consumer_groups["g"].members["a"].assignment.pending_revocation
    # Mid-rebalance state survives a reload.
    reloaded = GroupCoordinatorShard(CONFIG)
    log.replay_into(reloaded, 100)
    same_group(shard.consumer_groups["g"], reloaded.consumer_groups["g"])
    assert reloaded.consumer.clients["g"] == shard.consumer.clients["g"]
    # The same member goes on heartbeating against the reloaded shard, as against the first.
    owned_a = {ORDERS: frozenset(a2.assignment[ORDERS])} if a2.assignment else {}  # type: ignore[attr-defined]
    r1 = beat(shard, log, 200, "a", a2.member_epoch, owned=owned_a)  # type: ignore[attr-defined]
    r2 = reloaded.consumer_group_heartbeat(200, HeartbeatRequest("g", "a", a2.member_epoch, owned=owned_a),  # type: ignore[attr-defined]
                                           TOPICS)
    assert r1 == r2
    # A static member away for now, then a dynamic member leaving: tombstones in Kafka's order.
    beat(shard, log, 300, "b", -2)
    start = len(log.records)
    beat(shard, log, 310, "a", -1)
    assert log.kinds(start)[:3] == [(8, "a", True), (7, "a", True), (5, "a", True)]
    assert (3, None, False) in log.kinds(start)  # the group moves to a new epoch
    reloaded = GroupCoordinatorShard(CONFIG)
    log.replay_into(reloaded, 400)
    same_group(shard.consumer_groups["g"], reloaded.consumer_groups["g"])
    assert reloaded.timers.deadline(("consumer-member", "g", "b")) == 400 + CONFIG.consumer_session_timeout_ms


def test_a_heartbeat_that_changes_nothing_writes_nothing() -> None:
    shard, log = GroupCoordinatorShard(CONFIG), Log()
    a = beat(shard, log, 0, "a", 0, rebalance_timeout_ms=10000, subscribed_topic_names=("orders",),
             subscribed_topic_regex="audit\\..*", owned={})
    epoch = a.member_epoch  # type: ignore[attr-defined]
    owned = {ORDERS: frozenset(range(6)), AUDIT: frozenset(range(2))}
    beat(shard, log, 10, "a", epoch, owned=owned)
    written = len(log.records)
    kinds = {k for k, _, _ in log.kinds()}
    assert kinds == {3, 4, 5, 6, 7, 8, 16}
    for now in range(20, 200, 10):
        beat(shard, log, now, "a", epoch, owned=owned)
    assert len(log.records) == written
    # After a reload the regex is resolved again on the next heartbeat: same topics, no record.
    reloaded = GroupCoordinatorShard(CONFIG)
    log.replay_into(reloaded, 300)
    assert reloaded.consumer_groups["g"].regex_topic_names is None
    reloaded.consumer_group_heartbeat(310, HeartbeatRequest("g", "a", epoch, owned=owned), TOPICS,
                                      ("client-a", "/127.0.0.1"))
    assert reloaded.consumer_group_records("g") == []


def test_regexes_are_resolved_once_per_change_of_the_topics() -> None:
    shard, log = GroupCoordinatorShard(CONFIG), Log()
    a = beat(shard, log, 0, "a", 0, rebalance_timeout_ms=10000, subscribed_topic_regex="audit\\..*", owned={})
    group = shard.consumer_groups["g"]
    first = group.resolved_regexes["audit\\..*"]
    assert first.topics == {"audit.a"}
    epoch = a.member_epoch  # type: ignore[attr-defined]
    shard.consumer_group_heartbeat(10, HeartbeatRequest("g", "a", epoch), TOPICS)
    assert group.resolved_regexes["audit\\..*"] is first  # nothing changed: not resolved again
    more = {**TOPICS, "audit.b": TopicImage(OTHER, 1)}
    r = shard.consumer_group_heartbeat(20, HeartbeatRequest("g", "a", epoch), more)
    second = group.resolved_regexes["audit\\..*"]
    assert second.topics == {"audit.a", "audit.b"} and second.version > first.version and second.timestamp == 20
    assert r.member_epoch > epoch
    records = shard.consumer_group_records("g")
    regex_records = [r for r in records if rec.decode_key(r.key) == rec.ConsumerGroupKey(16, "g", "audit\\..*")]
    assert len(regex_records) == 1 and regex_records[0].value is not None
    assert cr.decode_value(16, regex_records[0].value).topics == ("audit.a", "audit.b")


def test_a_deleted_group_is_tombstoned_in_kafkas_order() -> None:
    shard, log = GroupCoordinatorShard(CONFIG), Log()
    a = beat(shard, log, 0, "a", 0, rebalance_timeout_ms=10000, subscribed_topic_regex="audit\\..*", owned={})
    beat(shard, log, 10, "a", -1)
    assert "a" not in shard.consumer_groups["g"].members
    start = len(log.records)
    res = shard.delete_groups(20, object(), ["g"])
    assert res.replies[0][1] == [("g", E.none)]
    log.add(res.records)
    assert a is not None and log.kinds(start) == [(6, None, True), (16, "audit\\..*", True), (4, None, True),
                                                  (3, None, True)]
    reloaded = GroupCoordinatorShard(CONFIG)
    log.replay_into(reloaded, 100)
    assert "g" not in reloaded.consumer_groups


def test_an_expired_member_is_tombstoned_by_the_tick() -> None:
    shard, log = GroupCoordinatorShard(CONFIG), Log()
    beat(shard, log, 0, "a", 0, rebalance_timeout_ms=10000, subscribed_topic_names=("orders",), owned={})
    start = len(log.records)
    log.add(shard.tick(CONFIG.consumer_session_timeout_ms + 1).records)
    assert log.kinds(start) == [(8, "a", True), (7, "a", True), (5, "a", True), (3, None, False)]
    reloaded = GroupCoordinatorShard(CONFIG)
    log.replay_into(reloaded, 10_000)
    same_group(shard.consumer_groups["g"], reloaded.consumer_groups["g"])
    assert not reloaded.consumer_groups["g"].members


def test_random_operations_replay_to_the_same_group() -> None:
    """Members join, heartbeat with what they were given, leave for good or for now, go silent
    and expire, in a seeded random order; at every step the log replays into an equal group."""
    import random

    for seed in range(8):
        rnd = random.Random(seed)
        shard, log = GroupCoordinatorShard(CONFIG), Log()
        state: dict[str, tuple[int, dict[uuid.UUID, frozenset[int]]]] = {}  # member -> (epoch, owned)
        now = 0
        for _ in range(60):
            now += rnd.choice([10, 100, 1000])
            log.add(shard.tick(now).records)
            name = rnd.choice(["a", "b", "c", "d"])
            instance = {"c": "static-c", "d": "static-d"}.get(name)
            if name not in state or name not in shard.consumer_groups.get("g", ConsumerGroup("g")).members:
                r = beat(shard, log, now, name, 0, instance_id=instance, rebalance_timeout_ms=5000,
                         subscribed_topic_names=rnd.choice([("orders",), ("orders", "audit.a")]),
                         subscribed_topic_regex=rnd.choice([None, "audit\\..*"]), owned={})
            else:
                epoch, owned = state[name]
                action = rnd.random()
                if action < 0.1:
                    r = beat(shard, log, now, name, -2 if instance else -1)
                    state.pop(name)
                    continue
                r = beat(shard, log, now, name, epoch, owned=owned)
            if isinstance(r, HeartbeatError):
                state.pop(name, None)
                continue
            owned = state.get(name, (0, {}))[1]
            state[name] = (r.member_epoch, dict(r.assignment) if r.assignment is not None else owned)  # type: ignore[attr-defined]
            reloaded = GroupCoordinatorShard(CONFIG)
            log.replay_into(reloaded, now)
            if "g" in shard.consumer_groups:
                same_group(shard.consumer_groups["g"], reloaded.consumer_groups["g"])
