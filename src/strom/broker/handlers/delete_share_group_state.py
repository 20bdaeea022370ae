"""DeleteShareGroupState (86): the group coordinator on another broker has this broker's share
coordinator delete share partitions' state (DeleteShareGroupOffsets, DeleteGroups; KIP-932's
persister, inter-broker): tombstones in __share_group_state, answered once the ISR has them. A
share partition without state is deleted already (NONE). Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_state_rpc import answer_partitions
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(partition: int, error: E) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def delete(coordinator: ShareCoordinatorRuntime, topic_id: Any, p: Any) -> dict[str, Any]:
        return _partition(p.partition, await coordinator.delete_state(request.group_id, topic_id, p.partition))

    return await answer_partitions(broker, ctx, request, delete, _partition)
