"""OffsetCommit (8): store committed offsets; answered once they are in __consumer_offsets.

v2-4 carry a retention time, which is ignored (as Kafka does since 2.1: offsets expire
offsets.retention.minutes after their group became empty). v9's generation id is a member epoch for
a consumer-protocol group: a commit from another epoch answers STALE_MEMBER_EPOCH, one from an
unknown member UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.api import OffsetCommitPartition, OffsetCommitRequestData, PartitionError
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


def sort_partitions(broker: Broker, coord: Any, coord_error: E, request_topics: Any, denied: set[str] | None = None
                    ) -> tuple[list[OffsetCommitPartition], dict[tuple[str, int], E], list[tuple[str, int]]]:
    """The partitions to commit, the errors of the others (``denied``: topics the principal may not
    read), and the request's order (shared with TxnOffsetCommit)."""
    denied = denied or set()
    known: list[OffsetCommitPartition] = []
    errors: dict[tuple[str, int], E] = {}
    order: list[tuple[str, int]] = []
    for t in request_topics:
        topic = broker.metadata.get_topic(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if coord is None:
                errors[tp] = coord_error
            elif t.name in denied:
                errors[tp] = E.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                errors[tp] = E.unknown_topic_or_partition
            else:
                known.append(OffsetCommitPartition(t.name, p.partition_index, p.committed_offset,
                                                   getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    return known, errors, order


def response_topics(order: list[tuple[str, int]], errors: dict[tuple[str, int], E]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, partition in order:
        topics.setdefault(name, []).append({"partition_index": partition, "error_code": errors[(name, partition)]})
    return [{"name": n, "partitions": ps} for n, ps in topics.items()]


def authorize(broker: Broker, ctx: RequestContext, group_id: str, coord: Any, coord_error: E,
              request_topics: Any) -> tuple[Any, E, set[str]]:
    """READ on the group (else every partition answers GROUP_AUTHORIZATION_FAILED) and on each topic
    (shared with TxnOffsetCommit)."""
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None, E.group_authorization_failed, set()
    return coord, coord_error, acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request_topics))


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord, coord_error = coordinator_for(broker, request.group_id)
    coord, coord_error, denied = authorize(broker, ctx, request.group_id, coord, coord_error, request.topics)
    known, errors, order = sort_partitions(broker, coord, coord_error, request.topics, denied)
    if coord is not None and known:
        req = OffsetCommitRequestData(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                                      request.generation_id_or_member_epoch, known, ctx.api_version)
        results: list[PartitionError] = await coord.commit_offsets(req)
        errors.update({(r.topic, r.partition): r.error for r in results})
    return {"throttle_time": 0, "topics": response_topics(order, errors)}
