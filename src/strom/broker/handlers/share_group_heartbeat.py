"""ShareGroupHeartbeat (76): join, stay in and leave a share group (KIP-932). The broker computes
the assignment (every member gets every partition of its subscribed topics); the answer carries the
member's epoch and, when it changed, its partitions by topic id. v1 is the version Kafka 4.1+ and
librdkafka 2.16 speak (the member id is the client's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.group_heartbeat import MetadataTopics, failed, heartbeat_coordinator
from strom.coordinator.share_group import ShareHeartbeatError, ShareHeartbeatRequest
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    names = request.subscribed_topic_names
    coord = heartbeat_coordinator(broker, ctx, request.group_id, names)
    if isinstance(coord, E):
        return failed(coord)
    req = ShareHeartbeatRequest(request.group_id, request.member_id, request.member_epoch, request.rack_id,
                                None if names is None else tuple(names))
    try:
        r = await coord.share_group_heartbeat(req, MetadataTopics(broker.metadata.topics()),
                                              (ctx.client_id or "", f"/{ctx.client_host}"))
    except ShareHeartbeatError as e:
        return failed(e.error, e.message)
    return {
        "throttle_time": 0, "error_code": E.none, "error_message": None, "member_id": r.member_id,
        "member_epoch": r.member_epoch, "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": None if r.assignment is None else {"topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(parts)}
            for topic_id, parts in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))]},
    }
