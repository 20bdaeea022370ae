"""What `strom groups` does for share groups (KIP-932), over strom's own connection: confluent-kafka's
AdminClient has no share-group calls, so these are Kafka's requests sent as Kafka's admin client
sends them — ListGroups (16) v5 with the type filter to every broker, FindCoordinator (10) for the
group, then ShareGroupDescribe (77), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and
DeleteShareGroupOffsets (92) at the coordinator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.cli.common import ClientOptions, Failure, admin_client, fetch_metadata, raw_security
from strom.client.raw_connection import RawConnection

LIST_GROUPS, FIND_COORDINATOR, SHARE_GROUP_DESCRIBE = 16, 10, 77
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
GROUP_ID_NOT_FOUND = 69


def error_name(code: int) -> str:
    from strom.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


def _connect(host: str, port: int, opts: ClientOptions) -> RawConnection:
    try:
        return RawConnection(host, port, opts.connect_timeout, raw_security(opts))
    except OSError as e:
        raise Failure(f"cannot reach {host}:{port}: {e}") from None


def _ask(host: str, port: int, opts: ClientOptions, api_key: int, version: int, body: Any) -> Any:
    conn = _connect(host, port, opts)
    try:
        return conn.request(api_key, version, body)
    except OSError as e:
        raise Failure(f"{host}:{port}: {e}") from None
    finally:
        conn.close()


def list_share_groups(opts: ClientOptions) -> dict[str, str]:
    """Every share group of the cluster (each broker lists those it coordinates): id -> state."""
    from kio.schema.list_groups.v5 import request as req

    md = fetch_metadata(admin_client(opts), opts)
    out: dict[str, str] = {}
    for b in md.brokers.values():
        r = _ask(b.host, b.port, opts, LIST_GROUPS, 5, req.ListGroupsRequest(states_filter=(), types_filter=("share",)))
        if int(r.error_code):
            raise Failure(f"list share groups at broker {b.id}: {error_name(int(r.error_code))}")
        out.update({str(g.group_id): str(g.group_state) for g in r.groups})
    return out


def coordinator(opts: ClientOptions, group: str) -> tuple[str, int]:
    from kio.schema.find_coordinator.v3 import request as req
    from kio.static.primitive import i8

    md = fetch_metadata(admin_client(opts), opts)
    b = min(md.brokers.values(), key=lambda b: b.id)
    r = _ask(b.host, b.port, opts, FIND_COORDINATOR, 3, req.FindCoordinatorRequest(key=group, key_type=i8(0)))
    if int(r.error_code):
        raise Failure(f"no coordinator for {group}: {error_name(int(r.error_code))}")
    return str(r.host), int(r.port)


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    subscribed: list[str]
    assignment: dict[str, list[int]]


@dataclass
class ShareGroupDetail:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: list[ShareMember]
    host: str
    port: int


def describe_share_group(opts: ClientOptions, group: str) -> ShareGroupDetail | None:
    """ShareGroupDescribe at the group's coordinator; None when there is no share group of that id."""
    from kio.schema.share_group_describe.v1 import request as req
    from kio.schema.types import GroupId

    host, port = coordinator(opts, group)
    r = _ask(host, port, opts, SHARE_GROUP_DESCRIBE, 1, req.ShareGroupDescribeRequest(
        group_ids=(GroupId(group),), include_authorized_operations=False))
    g = r.groups[0]
    if int(g.error_code) == GROUP_ID_NOT_FOUND:
        return None
    if int(g.error_code):
        raise Failure(f"describe {group}: {error_name(int(g.error_code))}")
    members = [ShareMember(str(m.member_id), str(m.client_id), str(m.client_host), int(m.member_epoch),
                           sorted(str(t) for t in m.subscribed_topic_names),
                           {str(t.topic_name): sorted(int(p) for p in t.partitions)
                            for t in m.assignment.topic_partitions}) for m in g.members]
    return ShareGroupDetail(group, str(g.group_state), int(g.group_epoch), int(g.assignment_epoch), members, host, port)


@dataclass
class SharePartitionRow:
    topic: str
    partition: int
    start_offset: int | None
    lag: int | None


def share_offsets(opts: ClientOptions, detail: ShareGroupDetail,
                  topics: dict[str, list[int]] | None = None) -> list[SharePartitionRow]:
    """DescribeShareGroupOffsets v1: start offset and lag of the share partitions (all of those the
    group has state for when ``topics`` is None)."""
    from kio.schema.describe_share_group_offsets.v1 import request as req
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32

    wanted = None if topics is None else tuple(
        req.DescribeShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(i32(p) for p in ps))
        for t, ps in topics.items())
    r = _ask(detail.host, detail.port, opts, DESCRIBE_SHARE_GROUP_OFFSETS, 1, req.DescribeShareGroupOffsetsRequest(
        groups=(req.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(detail.group_id), topics=wanted),)))
    g = r.groups[0]
    if int(g.error_code):
        raise Failure(f"share-group offsets of {detail.group_id}: {error_name(int(g.error_code))}")
    rows = []
    for t in g.topics:
        for p in t.partitions:
            if int(p.error_code):
                raise Failure(f"share-group offsets of {detail.group_id} on {t.topic_name}-{p.partition_index}: "
                              f"{error_name(int(p.error_code))}")
            rows.append(SharePartitionRow(str(t.topic_name), int(p.partition_index),
                                          None if p.start_offset < 0 else int(p.start_offset),
                                          None if p.lag < 0 else int(p.lag)))
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def alter_share_offsets(opts: ClientOptions, detail: ShareGroupDetail, offsets: dict[tuple[str, int], int]) -> None:
    from kio.schema.alter_share_group_offsets.v0 import request as req
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32, i64

    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, o))
    r = _ask(detail.host, detail.port, opts, ALTER_SHARE_GROUP_OFFSETS, 0, req.AlterShareGroupOffsetsRequest(
        group_id=GroupId(detail.group_id), topics=tuple(req.AlterShareGroupOffsetsRequestTopic(
            topic_name=TopicName(t), partitions=tuple(req.AlterShareGroupOffsetsRequestPartition(
                partition_index=i32(p), start_offset=i64(o)) for p, o in ps)) for t, ps in by_topic.items())))
    if int(r.error_code):
        raise Failure(f"reset offsets of {detail.group_id}: {error_name(int(r.error_code))}"
                      + (f" ({r.error_message})" if r.error_message else ""))
    for t in r.responses:
        for p in t.partitions:
            if int(p.error_code):
                raise Failure(f"reset failed for {t.topic_name}-{p.partition_index}: {error_name(int(p.error_code))}")


def delete_share_offsets(opts: ClientOptions, detail: ShareGroupDetail, topics: list[str]) -> None:
    from kio.schema.delete_share_group_offsets.v0 import request as req
    from kio.schema.types import GroupId, TopicName

    r = _ask(detail.host, detail.port, opts, DELETE_SHARE_GROUP_OFFSETS, 0, req.DeleteShareGroupOffsetsRequest(
        group_id=GroupId(detail.group_id),
        topics=tuple(req.DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in topics)))
    if int(r.error_code):
        raise Failure(f"delete offsets of {detail.group_id}: {error_name(int(r.error_code))}"
                      + (f" ({r.error_message})" if r.error_message else ""))
    for t in r.responses:
        if int(t.error_code):
            raise Failure(f"delete offsets of {detail.group_id} on {t.topic_name}: {error_name(int(t.error_code))}")
