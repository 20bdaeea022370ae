"""ReadShareGroupState (84): a share partition's leader on another broker reads the share
partition's state from this broker's share coordinator (KIP-932's persister, inter-broker). A read
at a newer leader epoch than the state's records that epoch first, fencing the older leader.
Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_state_rpc import answer_partitions
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(partition: int, error: E, start_offset: int = -1, batches: Any = (),
               state_epoch: int = 0) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None, "state_epoch": state_epoch,
            "start_offset": start_offset,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in batches]}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def read(coordinator: ShareCoordinatorRuntime, topic_id: Any, p: Any) -> dict[str, Any]:
        error, state = await coordinator.read_state(request.group_id, topic_id, p.partition, p.leader_epoch)
        if error is not E.none or state is None:
            return _partition(p.partition, error)
        return _partition(p.partition, E.none, state.start_offset, state.batches, state.state_epoch)

    return await answer_partitions(broker, ctx, request, read, _partition)
