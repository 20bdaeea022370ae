"""WriteShareGroupState (85): a share partition's leader on another broker has this broker's share
coordinator write the share partition's state to __share_group_state (KIP-932's persister,
inter-broker); answered once the ISR has it. A write from an older leader epoch than the state's is
refused (FENCED_LEADER_EPOCH), and so is one from an older state epoch (FENCED_STATE_EPOCH: an
admin started the state afresh since that leader read it). Brokers only (CLUSTER_ACTION). v1 adds the delivery-complete count,
which strom does not keep."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_state_rpc import answer_partitions
from strom.coordinator.share_state_records import PersistedBatch
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1


def _partition(partition: int, error: E) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def write(coordinator: ShareCoordinatorRuntime, topic_id: Any, p: Any) -> dict[str, Any]:
        batches = [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in p.state_batches]
        return _partition(p.partition, await coordinator.write_state(
            request.group_id, topic_id, p.partition, p.leader_epoch, p.start_offset, batches, p.state_epoch))

    return await answer_partitions(broker, ctx, request, write, _partition)
