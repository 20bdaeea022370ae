"""ShareAcknowledge (79): acknowledge records a share group member acquired (ACCEPT, RELEASE,
REJECT; GAP for offsets the log does not hold), in its share session; answered once the share
partitions' new state is written. Epoch -1 acknowledges and closes the session."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType
from strom.share.manager import AckBatch
from strom.share.share_session import SharePartitionKey

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 1


def acks_of(topics: Iterable[Any]) -> dict[SharePartitionKey, list[AckBatch]]:
    """The acknowledgement batches of a request by partition (a topic may be listed twice)."""
    out: dict[SharePartitionKey, list[AckBatch]] = {}
    for t in topics:
        if t.topic_id is None:
            continue
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, tuple(int(x) for x in b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            if batches:
                out.setdefault((t.topic_id, p.partition_index), []).extend(batches)
    return out


def leader_of(broker: Broker, leader_epoch: int) -> dict[str, int]:
    return {"leader_id": broker.config.broker_id if leader_epoch >= 0 else -1, "leader_epoch": leader_epoch}


def _error(error: E, message: str | None = None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "responses": [],
            "node_endpoints": []}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    manager = broker.share_manager
    if manager is None:
        return _error(E.coordinator_not_available)
    if not request.group_id or not request.member_id:
        return _error(E.invalid_request, "GroupId and MemberId must be set")
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _error(E.group_authorization_failed)
    acks = acks_of(request.topics)
    error, message, errors = await manager.share_acknowledge(request.group_id, request.member_id,
                                                             request.share_session_epoch, acks)
    if error is not E.none:
        return _error(error, message)
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (topic_id, partition), e in errors.items():
        by_topic.setdefault(topic_id, []).append({"partition_index": partition, "error_code": e,
                                                  "error_message": None, "current_leader": leader_of(broker, 0)})
    return {"throttle_time": 0, "error_code": E.none, "error_message": None,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()], "node_endpoints": []}
