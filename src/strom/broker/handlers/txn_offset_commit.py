"""TxnOffsetCommit (28): offsets written to __consumer_offsets inside the producer's transaction;
the group coordinator applies them when the COMMIT marker reaches that partition (an ABORT drops
them). Sent to the group coordinator, after AddOffsetsToTxn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.offset_commit import response_topics, sort_partitions
from strom.coordinator.api import OffsetCommitRequestData, PartitionError
from strom.coordinator.runtime import coordinator_for
from strom.coordinator.txn_runtime import fenced_error

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4
PRODUCER_FENCED_VERSION = 3


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord, coord_error = coordinator_for(broker, request.group_id)
    known, errors, order = sort_partitions(broker, coord, coord_error, request.topics)
    if coord is not None and known:
        req = OffsetCommitRequestData(request.group_id, getattr(request, "member_id", ""),
                                      getattr(request, "group_instance_id", None),
                                      getattr(request, "generation_id", -1), known)
        results: list[PartitionError] = await coord.txn_commit_offsets(req, request.producer_id,
                                                                       request.producer_epoch)
        errors.update({(r.topic, r.partition): fenced_error(r.error, ctx.api_version, PRODUCER_FENCED_VERSION)
                       for r in results})
    return {"throttle_time": 0, "topics": response_topics(order, errors)}
