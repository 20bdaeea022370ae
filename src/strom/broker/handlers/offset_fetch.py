"""OffsetFetch (9): committed offset, leader epoch and metadata per partition; -1 where none.

v1-7 ask for one group, v8+ for several. A null topic list (v2+) means every committed partition.
With require_stable (v7+), a partition whose transactional offset commit is not decided yet answers
UNSTABLE_OFFSET_COMMIT; the client retries. v9 carries a consumer-protocol member's id and epoch: a
wrong one answers UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for the group. v10 names topics by id
(KIP-848), in the request and the answer: an id this cluster does not know answers UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.offset_commit import request_topics
from strom.coordinator.api import FetchedOffset
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 10
TOPIC_ID_VERSION = 10


def _fetch_group(broker: Broker, ctx: RequestContext, group_id: str, topics: Any,
                 require_stable: bool = False, member_id: str | None = None,
                 member_epoch: int = -1) -> tuple[E, list[dict[str, Any]]]:
    by_id = ctx.api_version >= TOPIC_ID_VERSION
    unknown_ids: list[dict[str, Any]] = []  # v10: the topics asked for by an id not known here
    wanted = None
    if topics is not None:
        wanted = []
        for ref, t in request_topics(broker, topics, by_id):
            if ref[0] is None:
                unknown_ids.append({"topic_id": ref[1], "partitions": [
                    {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": None,
                     "error_code": E.unknown_topic_id} for p in t.partition_indexes]})
            else:
                wanted += [(ref[0], p) for p in t.partition_indexes]
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return E.group_authorization_failed, []
    coord, error = coordinator_for(broker, group_id)
    if coord is None:
        fetched = [FetchedOffset(t, p, error=error) for t, p in (wanted or [])]
    elif (member_error := coord.validate_offset_fetch(group_id, member_id, member_epoch)) is not E.none:
        # v9+: a consumer-protocol member gives its id and epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH).
        return member_error, []
    else:
        fetched = coord.fetch_offsets(group_id, wanted, require_stable)
        error = E.none
    if acls.enabled:
        # Asked for by name, a topic the principal may not describe answers TOPIC_AUTHORIZATION_FAILED;
        # in an all-topics answer it is left out (Kafka's behaviour).
        hidden = acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {f.topic for f in fetched}, wanted is not None)
        if hidden and wanted is None:
            fetched = [f for f in fetched if f.topic not in hidden]
        elif hidden:
            fetched = [FetchedOffset(f.topic, f.partition, error=E.topic_authorization_failed) if f.topic in hidden
                       else f for f in fetched]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for f in fetched:
        by_topic.setdefault(f.topic, []).append({
            "partition_index": f.partition, "committed_offset": f.offset, "committed_leader_epoch": f.leader_epoch,
            "metadata": f.metadata, "error_code": f.error})
    if not by_id:
        return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    ids = {name: info.topic_id for name in by_topic if (info := broker.metadata.get_topic(name)) is not None}
    # A committed topic that no longer exists has no id: it is left out of an answer by ids.
    return error, [{"topic_id": ids[name], "partitions": parts} for name, parts in by_topic.items()
                   if name in ids] + unknown_ids


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            error, topics = _fetch_group(broker, ctx, g.group_id, g.topics, request.require_stable,
                                         getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(broker, ctx, request.group_id, request.topics,
                                 getattr(request, "require_stable", False))
    return {"throttle_time": 0, "topics": topics, "error_code": error}
