"""OffsetDelete (47): delete a group's committed offsets for partitions it does not consume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return {"error_code": E.group_authorization_failed, "throttle_time": 0, "topics": []}
    coord, error = coordinator_for(broker, request.group_id)
    if coord is None:
        return {"error_code": error, "throttle_time": 0, "topics": []}
    denied = acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    errors: dict[tuple[str, int], E] = {}
    known: list[tuple[str, int]] = []
    for t in request.topics:
        topic = broker.metadata.get_topic(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in denied:
                errors[tp] = E.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                errors[tp] = E.unknown_topic_or_partition
            else:
                known.append(tp)
    group_error, results = await coord.delete_offsets(request.group_id, known)
    if group_error is not E.none:
        return {"error_code": group_error, "throttle_time": 0, "topics": []}
    errors.update({(r.topic, r.partition): r.error for r in results})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (name, partition), error in errors.items():
        by_topic.setdefault(name, []).append({"partition_index": partition, "error_code": error})
    return {"error_code": E.none, "throttle_time": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}
