"""ReadShareGroupStateSummary (87): the group coordinator on another broker reads share partitions'
start offset and epochs from this broker's share coordinator, for DescribeShareGroupOffsets
(KIP-932's persister, inter-broker). A share partition without state answers start offset -1
(Kafka's UNINITIALIZED_START_OFFSET). v1 adds the delivery-complete count: records at or after the
start offset already ACKNOWLEDGED or ARCHIVED, which the lag leaves out. Records no leader epoch.
Brokers only (CLUSTER_ACTION)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_state_rpc import answer_partitions
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime

API_KEY = 87
MIN_VERSION = 0
MAX_VERSION = 1


def _partition(partition: int, error: E, state_epoch: int = 0, leader_epoch: int = 0, start_offset: int = -1,
               delivery_complete_count: int = -1) -> dict[str, Any]:
    return {"partition": partition, "error_code": error, "error_message": None, "state_epoch": state_epoch,
            "leader_epoch": leader_epoch, "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def summary_of(coordinator: ShareCoordinatorRuntime, topic_id: Any, p: Any) -> dict[str, Any]:
        error, summary = coordinator.read_summary(request.group_id, topic_id, p.partition)
        if error is not E.none or summary is None:
            return _partition(p.partition, error)
        return _partition(p.partition, E.none, summary.state_epoch, summary.leader_epoch, summary.start_offset,
                          summary.delivery_complete_count)

    return await answer_partitions(broker, ctx, request, summary_of, _partition)
