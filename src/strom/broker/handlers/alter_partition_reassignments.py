"""AlterPartitionReassignments (45): move a partition's replicas to other brokers (KIP-455), or
cancel a move (replicas null). A controller API; on a single broker the only possible replica
list is [this broker]."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1


async def _one(broker: Broker, topic: str, p: int, replicas: list[int] | None) -> tuple[E, str | None]:
    cluster = broker.cluster
    if cluster is None:
        info = broker.metadata.get_topic(topic)
        if info is None or not 0 <= p < info.partitions:
            return E.unknown_topic_or_partition, None
        if replicas is None:
            return E.no_reassignment_in_progress, None
        if replicas != [broker.config.broker_id]:
            return E.invalid_replica_assignment, f"a single broker can only hold [{broker.config.broker_id}]"
        return E.none, None
    assert cluster.controller is not None
    return await cluster.controller.reassign(topic, p, replicas)


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    cluster = broker.cluster
    if not broker.acls.cluster_allowed(ctx, AclOperation.ALTER):
        return {"throttle_time": 0, "error_code": E.cluster_authorization_failed, "error_message": None,
                "responses": [], "allow_replication_factor_change": True}
    if cluster is not None and (cluster.controller is None or not cluster.controller.active):
        return {"throttle_time": 0, "error_code": E.not_controller, "error_message": None, "responses": [],
                "allow_replication_factor_change": True}
    responses = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            replicas = None if p.replicas is None else [int(b) for b in p.replicas]
            error, message = await _one(broker, t.name, p.partition_index, replicas)
            parts.append({"partition_index": p.partition_index, "error_code": error, "error_message": message})
        responses.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "error_code": E.none, "error_message": None, "responses": responses,
            "allow_replication_factor_change": True}
