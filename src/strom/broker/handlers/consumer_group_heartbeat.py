"""ConsumerGroupHeartbeat (68): join, stay in, reconcile with and leave a consumer-protocol group
(KIP-848). The broker computes the assignment; the answer carries the member's epoch and, when it
changed, its partitions (topic ids). v1 adds the broker-resolved regular expression.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.group_heartbeat import MetadataTopics, failed, heartbeat_coordinator
from strom.coordinator.api import duration_ms
from strom.coordinator.consumer_group import HeartbeatError, HeartbeatRequest
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if "consumer" not in broker.config.group_coordinator_rebalance_protocols:
        # group.coordinator.rebalance.protocols without consumer: not offered, as in Kafka.
        return failed(E.unsupported_version, "The new consumer group protocol is not enabled.")
    names = request.subscribed_topic_names
    coord = heartbeat_coordinator(broker, ctx, request.group_id, names)
    if isinstance(coord, E):
        return failed(coord)
    owned = request.topic_partitions
    req = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=None if owned is None else _assignment(owned),
    )
    try:
        r = await coord.consumer_group_heartbeat(req, MetadataTopics(broker.metadata.topics()),
                                           (ctx.client_id or "", f"/{ctx.client_host}"))
    except HeartbeatError as e:
        return failed(e.error, e.message)
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "error_message": r.message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": None if r.assignment is None else {"topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(parts)}
            for topic_id, parts in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))]},
    }


def _assignment(owned: Any) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in owned:
        if tp.topic_id is not None:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out
