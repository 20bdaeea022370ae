"""What the share coordinator's inter-broker state requests share (InitializeShareGroupState 83,
ReadShareGroupState 84, WriteShareGroupState 85, DeleteShareGroupState 86,
ReadShareGroupStateSummary 87; KIP-932's persister): brokers only (CLUSTER_ACTION), a topic id
required, this broker's share coordinator, then one answer per partition, the partitions of a
request served side by side. Not a handler itself (no API_KEY)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

# (the share coordinator, the topic id, the request's partition) -> the partition's answer
PartitionAnswer = Callable[["ShareCoordinatorRuntime", Any, Any], Awaitable[dict[str, Any]]]


async def answer_partitions(broker: Broker, ctx: RequestContext, request: Any, answer: PartitionAnswer,
                            refused: Callable[[int, E], dict[str, Any]]) -> dict[str, Any]:
    """``answer`` for each partition of ``request.topics``, or ``refused(partition, error)``."""
    coordinator = broker.share_coordinator
    allowed = broker.acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)

    async def one(topic_id: Any, p: Any) -> dict[str, Any]:
        if not allowed:
            return refused(p.partition, E.cluster_authorization_failed)
        if topic_id is None:
            return refused(p.partition, E.invalid_request)
        if coordinator is None:
            return refused(p.partition, E.coordinator_not_available)
        return await answer(coordinator, topic_id, p)

    results = []
    for t in request.topics:
        partitions = await asyncio.gather(*(one(t.topic_id, p) for p in t.partitions))
        results.append({"topic_id": t.topic_id, "partitions": list(partitions)})
    return {"results": results}
