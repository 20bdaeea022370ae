"""Every advertised version of the group APIs, spoken raw: a whole group life cycle per version set."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection
from test_groups_common import group_broker_fixture, start_group_broker

from strom.protocol.build import build

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, COMMIT, FETCH = 10, 11, 12, 13, 14, 15, 16, 8, 9
DELETE_GROUPS, OFFSET_DELETE = 42, 47
RANGES = {FIND_COORDINATOR: (0, 6), JOIN: (0, 9), SYNC: (0, 5), HEARTBEAT: (0, 4), LEAVE: (0, 5), COMMIT: (2, 10),
          FETCH: (1, 10), DESCRIBE: (0, 6), LIST: (0, 5), DELETE_GROUPS: (0, 2), OFFSET_DELETE: (0, 0)}
MODULES = {FIND_COORDINATOR: "find_coordinator", JOIN: "join_group", SYNC: "sync_group", HEARTBEAT: "heartbeat",
           LEAVE: "leave_group", COMMIT: "offset_commit", FETCH: "offset_fetch", DESCRIBE: "describe_groups",
           LIST: "list_groups", DELETE_GROUPS: "delete_groups", OFFSET_DELETE: "offset_delete"}
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x05g-raw\xff\xff\xff\xff"


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


def _cls(api: int, version: int, name: str) -> type:
    module = __import__(f"kio.schema.{MODULES[api]}.v{version}.request", fromlist=[name])
    return getattr(module, name)  # type: ignore[no-any-return]


def call(conn: RawConnection, api: int, version: int, name: str, **fields: Any) -> Any:
    """Build the request of that version from version-independent fields (extra ones are dropped)."""
    return conn.request(api, version, build(_cls(api, version, name), fields))


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def _v(api: int, i: int) -> int:
    lo, hi = RANGES[api]
    return max(lo, min(i, hi))


def test_advertised_ranges(gbroker: BrokerProcess) -> None:
    with RawConnection(gbroker.bootstrap) as conn:
        keys = {k.api_key: (k.min_version, k.max_version) for k in conn.api_versions().api_keys}
    for api, rng in RANGES.items():
        assert keys[api] == rng, (api, keys.get(api))


@pytest.mark.parametrize("i", range(11))
def test_group_life_cycle_at_every_version(gbroker: BrokerProcess, i: int) -> None:
    group, topic = f"raw-{i}", "g-raw"
    with RawConnection(gbroker.bootstrap) as conn:
        if i == 0:
            conn.create_topic(topic, 2)
        v = _v(FIND_COORDINATOR, i)
        fc = call(conn, FIND_COORDINATOR, v, "FindCoordinatorRequest", key=group, key_type=0,
                  coordinator_keys=(group,))
        found = fc.coordinators[0] if v >= 4 else fc
        assert (int(found.error_code), found.port) == (0, gbroker.port)

        v = _v(JOIN, i)
        join = dict(group_id=group, session_timeout=ms(10_000), rebalance_timeout=ms(10_000), member_id="",
                    group_instance_id=None, protocol_type="consumer", reason=None,
                    protocols=(build(_cls(JOIN, v, "JoinGroupRequestProtocol"), {"name": "range",
                                                                                  "metadata": SUBSCRIPTION}),))
        r = call(conn, JOIN, v, "JoinGroupRequest", **join)
        if v >= 4:  # KIP-394: first get a member id, then join with it
            assert int(r.error_code) == 79 and r.member_id
            join["member_id"] = r.member_id
            r = call(conn, JOIN, v, "JoinGroupRequest", **join)
        assert int(r.error_code) == 0, r
        member, generation = r.member_id, r.generation_id
        assert generation == 1 and r.leader == member and r.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in r.members] == [(member, SUBSCRIPTION)]

        v = _v(SYNC, i)
        assignment = build(_cls(SYNC, v, "SyncGroupRequestAssignment"), {"member_id": member, "assignment": b"A"})
        r = call(conn, SYNC, v, "SyncGroupRequest", group_id=group, generation_id=generation, member_id=member,
                 protocol_type="consumer", protocol_name="range", assignments=(assignment,))
        assert (int(r.error_code), r.assignment) == (0, b"A")

        r = call(conn, HEARTBEAT, _v(HEARTBEAT, i), "HeartbeatRequest", group_id=group, generation_id=generation,
                 member_id=member)
        assert int(r.error_code) == 0

        v = _v(COMMIT, i)
        part = build(_cls(COMMIT, v, "OffsetCommitRequestPartition"),
                     {"partition_index": 1, "committed_offset": 42 + i, "committed_leader_epoch": 3,
                      "committed_metadata": f"m{i}"})
        tcls = _cls(COMMIT, v, "OffsetCommitRequestTopic")
        # v10 names topics by id (build() keeps the key the version has): UNKNOWN_TOPIC_ID for an unknown one.
        topic_id, unknown_id = conn.topic_id(topic), uuid.UUID(int=1)
        topics = (build(tcls, {"name": topic, "topic_id": topic_id, "partitions": (part,)}),
                  build(tcls, {"name": "no-such-topic", "topic_id": unknown_id, "partitions": (part,)}))
        r = call(conn, COMMIT, v, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=generation,
                 member_id=member, retention_time=-1, topics=topics)
        if v >= 10:
            assert [(t.topic_id, int(t.partitions[0].error_code)) for t in r.topics] == [(topic_id, 0), (unknown_id, 100)]
        else:
            assert [(t.name, int(t.partitions[0].error_code)) for t in r.topics] == [(topic, 0), ("no-such-topic", 3)]

        v = _v(FETCH, i)
        if v >= 8:
            gt = build(_cls(FETCH, v, "OffsetFetchRequestTopics"),
                       {"name": topic, "topic_id": topic_id, "partition_indexes": (0, 1)})
            g = build(_cls(FETCH, v, "OffsetFetchRequestGroup"),
                      {"group_id": group, "member_id": None, "member_epoch": -1, "topics": (gt,)})
            r = call(conn, FETCH, v, "OffsetFetchRequest", groups=(g,), require_stable=True)
            (rg,) = r.groups
            assert rg.group_id == group
            parts = rg.topics[0].partitions
        else:
            t = build(_cls(FETCH, v, "OffsetFetchRequestTopic"), {"name": topic, "partition_indexes": (0, 1)})
            r = call(conn, FETCH, v, "OffsetFetchRequest", group_id=group, topics=(t,), require_stable=True)
            parts = r.topics[0].partitions
        got = {p.partition_index: (p.committed_offset, p.metadata) for p in parts}
        assert got == {0: (-1, ""), 1: (42 + i, f"m{i}")}
        if v >= 5:  # the epoch round-trips when the commit carried one (OffsetCommit v6+)
            epoch = 3 if _v(COMMIT, i) >= 6 else -1
            assert {p.partition_index: p.committed_leader_epoch for p in parts} == {0: -1, 1: epoch}

        v = _v(DESCRIBE, i)
        r = call(conn, DESCRIBE, v, "DescribeGroupsRequest", groups=(group,), include_authorized_operations=False)
        (d,) = r.groups
        assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
        assert [(m.member_id, m.member_assignment) for m in d.members] == [(member, b"A")]

        v = _v(LIST, i)
        r = call(conn, LIST, v, "ListGroupsRequest", states_filter=("Stable",), types_filter=())
        listed = {g.group_id: g for g in r.groups}
        assert listed[group].protocol_type == "consumer"
        if v >= 4:
            assert listed[group].group_state == "Stable"

        v = _v(DELETE_GROUPS, i)
        r = call(conn, DELETE_GROUPS, v, "DeleteGroupsRequest", groups_names=(group,))
        assert int(r.results[0].error_code) == 68  # NON_EMPTY_GROUP

        v = _v(LEAVE, i)
        identity = {"member_id": member, "group_instance_id": None, "reason": "done"}
        members = (build(_cls(LEAVE, v, "MemberIdentity"), identity),) if v >= 3 else ()
        r = call(conn, LEAVE, v, "LeaveGroupRequest", group_id=group, member_id=member, members=members)
        assert int(r.error_code) == 0
        if v >= 3:
            assert [(m.member_id, int(m.error_code)) for m in r.members] == [(member, 0)]
        r = call(conn, DESCRIBE, _v(DESCRIBE, i), "DescribeGroupsRequest", groups=(group,),
                 include_authorized_operations=False)
        assert r.groups[0].group_state == "Empty"

        # Simple-consumer commit (generation -1, no member id) to the now Empty group.
        v = _v(COMMIT, i)
        p0 = build(_cls(COMMIT, v, "OffsetCommitRequestPartition"),
                   {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1, "committed_metadata": None})
        r = call(conn, COMMIT, v, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=-1,
                 member_id="", retention_time=-1, topics=(build(tcls, {"name": topic, "topic_id": topic_id, "partitions": (p0,)}),))
        assert int(r.topics[0].partitions[0].error_code) == 0

        dp = build(_cls(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition"), {"partition_index": 1})
        dt = build(_cls(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic"), {"name": topic, "partitions": (dp,)})
        r = call(conn, OFFSET_DELETE, 0, "OffsetDeleteRequest", group_id=group, topics=(dt,))
        assert int(r.error_code) == 0 and int(r.topics[0].partitions[0].error_code) == 0

        r = call(conn, DELETE_GROUPS, _v(DELETE_GROUPS, i), "DeleteGroupsRequest", groups_names=(group, group + "x"))
        assert [(x.group_id, int(x.error_code)) for x in r.results] == [(group, 0), (group + "x", 69)]


def test_describe_unknown_group(gbroker: BrokerProcess) -> None:
    with RawConnection(gbroker.bootstrap) as conn:
        r = call(conn, DESCRIBE, 5, "DescribeGroupsRequest", groups=("nope",), include_authorized_operations=False)
        assert (int(r.groups[0].error_code), r.groups[0].group_state) == (0, "Dead")
        r = call(conn, DESCRIBE, 6, "DescribeGroupsRequest", groups=("nope",), include_authorized_operations=False)
        assert int(r.groups[0].error_code) == 69  # GROUP_ID_NOT_FOUND from v6


def test_consumer_offsets_topic_is_internal_and_compacted(gbroker: BrokerProcess) -> None:
    with RawConnection(gbroker.bootstrap) as conn:
        call(conn, FIND_COORDINATOR, 3, "FindCoordinatorRequest", key="any", key_type=0)
        md = conn.metadata(["__consumer_offsets"])
        (t,) = md.topics
        assert t.is_internal and len(t.partitions) == 3  # offsets.topic.num.partitions in the test broker


@pytest.mark.timeout(60)
def test_initial_rebalance_delay_is_honoured(tmp_path: Any) -> None:
    """Kafka's default: the first rebalance of an empty group waits 3 s for more members."""
    b = start_group_broker(tmp_path / "data", **{"group.initial.rebalance.delay.ms": "3000"})
    try:
        with RawConnection(b.bootstrap, timeout=20) as conn:
            protocol = build(_cls(JOIN, 3, "JoinGroupRequestProtocol"), {"name": "range", "metadata": SUBSCRIPTION})
            t0 = time.monotonic()
            r = call(conn, JOIN, 3, "JoinGroupRequest", group_id="slow", session_timeout=ms(10_000),
                     rebalance_timeout=ms(10_000), member_id="", protocol_type="consumer", protocols=(protocol,))
            took = time.monotonic() - t0
        assert int(r.error_code) == 0 and r.generation_id == 1
        assert 3.0 <= took < 4.5, took
    finally:
        b.stop()
