"""DeleteShareGroupState (86): the group coordinator on another broker has this broker's share
coordinator delete share partitions' state (DeleteShareGroupOffsets, DeleteGroups; KIP-932's
persister, inter-broker): tombstones in __share_group_state, answered once the ISR has them. A
share partition without state is deleted already (NONE). Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(partition: int, error: E) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = broker.share_coordinator
    allowed = broker.acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)

    async def delete(topic_id: Any, p: Any) -> dict[str, Any]:
        if not allowed:
            return _partition(p.partition, E.cluster_authorization_failed)
        if topic_id is None:
            return _partition(p.partition, E.invalid_request)
        if coordinator is None:
            return _partition(p.partition, E.coordinator_not_available)
        return _partition(p.partition, await coordinator.delete_state(request.group_id, topic_id, p.partition))

    results = []
    for t in request.topics:
        partitions = await asyncio.gather(*(delete(t.topic_id, p) for p in t.partitions))
        results.append({"topic_id": t.topic_id, "partitions": list(partitions)})
    return {"results": results}
