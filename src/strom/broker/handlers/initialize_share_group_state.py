"""InitializeShareGroupState (83): the group coordinator on another broker has this broker's share
coordinator start share partitions' state afresh at a start offset, at a state epoch
(AlterShareGroupOffsets; KIP-932's persister, inter-broker). A state epoch older than the state's is
refused (FENCED_STATE_EPOCH). Answered once __share_group_state has the new snapshot in its ISR.
Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(partition: int, error: E) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = broker.share_coordinator
    allowed = broker.acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)

    async def initialize(topic_id: Any, p: Any) -> dict[str, Any]:
        if not allowed:
            return _partition(p.partition, E.cluster_authorization_failed)
        if topic_id is None:
            return _partition(p.partition, E.invalid_request)
        if coordinator is None:
            return _partition(p.partition, E.coordinator_not_available)
        return _partition(p.partition, await coordinator.initialize_state(
            request.group_id, topic_id, p.partition, p.start_offset, p.state_epoch))

    results = []
    for t in request.topics:
        partitions = await asyncio.gather(*(initialize(t.topic_id, p) for p in t.partitions))
        results.append({"topic_id": t.topic_id, "partitions": list(partitions)})
    return {"results": results}
