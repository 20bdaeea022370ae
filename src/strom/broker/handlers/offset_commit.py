"""OffsetCommit (8): store committed offsets; answered once they are in __consumer_offsets.

v2-4 carry a retention time, which is ignored (as Kafka does since 2.1: offsets expire
offsets.retention.minutes after their group became empty). v9's generation id is a member epoch for
a consumer-protocol group: a commit from another epoch answers STALE_MEMBER_EPOCH, one from an
unknown member UNKNOWN_MEMBER_ID. v10 names each topic by its id (KIP-848): an id this cluster does
not know answers UNKNOWN_TOPIC_ID; the offsets are kept by topic name, as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
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
MAX_VERSION = 10
TOPIC_ID_VERSION = 10


# A request's topic: (name, id). Before v10 the id is None; from v10 the name is the one the id has
# here, None for an id this cluster does not know.
TopicRef = tuple[str | None, uuid.UUID | None]


def request_topics(broker: Broker, topics: Any, by_id: bool) -> list[tuple[TopicRef, Any]]:
    """Each request topic with its TopicRef (shared with TxnOffsetCommit, and with OffsetFetch for
    topic ids)."""
    if not by_id:
        return [((t.name, None), t) for t in topics]
    by_id_of = broker.metadata.topic_by_id
    return [((info.name if (info := by_id_of(t.topic_id)) is not None else None, t.topic_id), t) for t in topics]


def sort_partitions(broker: Broker, coord: Any, coord_error: E, topics: list[tuple[TopicRef, Any]],
                    denied: set[str] | None = None
                    ) -> tuple[list[OffsetCommitPartition], dict[tuple[TopicRef, int], E], list[tuple[TopicRef, int]]]:
    """The partitions to commit, the errors of the others (``denied``: topics the principal may not
    read), and the request's order (shared with TxnOffsetCommit)."""
    denied = denied or set()
    known: list[OffsetCommitPartition] = []
    errors: dict[tuple[TopicRef, int], E] = {}
    order: list[tuple[TopicRef, int]] = []
    for ref, t in topics:
        name = ref[0]
        topic = broker.metadata.get_topic(name) if name is not None else None
        for p in t.partitions:
            tp = (ref, p.partition_index)
            order.append(tp)
            if coord is None:
                errors[tp] = coord_error
            elif name is None:
                errors[tp] = E.unknown_topic_id
            elif name in denied:
                errors[tp] = E.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                errors[tp] = E.unknown_topic_or_partition
            else:
                known.append(OffsetCommitPartition(name, p.partition_index, p.committed_offset,
                                                   getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    return known, errors, order


def record_results(errors: dict[tuple[TopicRef, int], E], order: list[tuple[TopicRef, int]],
                   results: list[PartitionError], convert: Callable[[E], E] = lambda e: e) -> None:
    """The coordinator's answers (by topic name) into ``errors`` (by TopicRef)."""
    ref_of = {ref[0]: ref for ref, _ in order}
    errors.update({(ref_of[r.topic], r.partition): convert(r.error) for r in results})


def response_topics(order: list[tuple[TopicRef, int]], errors: dict[tuple[TopicRef, int], E]) -> list[dict[str, Any]]:
    topics: dict[TopicRef, list[dict[str, Any]]] = {}
    for ref, partition in order:
        topics.setdefault(ref, []).append({"partition_index": partition, "error_code": errors[(ref, partition)]})
    # Both keys: the version's schema takes the one it has (v10 the id, before it the name).
    return [{"name": name, "topic_id": topic_id, "partitions": ps} for (name, topic_id), ps in topics.items()]


def authorize(broker: Broker, ctx: RequestContext, group_id: str, coord: Any, coord_error: E,
              topics: list[tuple[TopicRef, Any]]) -> tuple[Any, E, set[str]]:
    """READ on the group (else every partition answers GROUP_AUTHORIZATION_FAILED) and on each topic
    (shared with TxnOffsetCommit)."""
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None, E.group_authorization_failed, set()
    names = (ref[0] for ref, _ in topics if ref[0] is not None)
    return coord, coord_error, acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, names)


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = request_topics(broker, request.topics, ctx.api_version >= TOPIC_ID_VERSION)
    coord, coord_error = coordinator_for(broker, request.group_id)
    coord, coord_error, denied = authorize(broker, ctx, request.group_id, coord, coord_error, topics)
    known, errors, order = sort_partitions(broker, coord, coord_error, topics, denied)
    if coord is not None and known:
        req = OffsetCommitRequestData(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                                      request.generation_id_or_member_epoch, known, ctx.api_version)
        record_results(errors, order, await coord.commit_offsets(req))
    return {"throttle_time": 0, "topics": response_topics(order, errors)}
