"""InitializeShareGroupState (83): the group coordinator on another broker has this broker's share
coordinator start share partitions' state afresh at a start offset, at a state epoch
(AlterShareGroupOffsets; KIP-932's persister, inter-broker). A state epoch older than the state's is
refused (FENCED_STATE_EPOCH). Answered once __share_group_state has the new snapshot in its ISR.
Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_state_rpc import answer_partitions
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(partition: int, error: E) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def initialize(coordinator: ShareCoordinatorRuntime, topic_id: Any, p: Any) -> dict[str, Any]:
        return _partition(p.partition, await coordinator.initialize_state(
            request.group_id, topic_id, p.partition, p.start_offset, p.state_epoch))

    return await answer_partitions(broker, ctx, request, initialize, _partition)
