"""TxnOffsetCommit (28): offsets written to __consumer_offsets inside the producer's transaction;
the group coordinator applies them when the COMMIT marker reaches that partition (an ABORT drops
them). Sent to the group coordinator, after AddOffsetsToTxn.

v5 belongs to transactions V2 (KIP-890 part 2): it adds the offsets partition to the transaction
itself, with no AddOffsetsToTxn before it. strom runs transactions V1 (no ``transaction.version`` is
finalized), so v4 stays the last version served."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.offset_commit import (
    authorize,
    record_results,
    request_topics,
    response_topics,
    sort_partitions,
)
from strom.coordinator.api import OffsetCommitRequestData, PartitionError
from strom.coordinator.group_runtime import coordinator_for
from strom.coordinator.txn_runtime import fenced_error
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4
PRODUCER_FENCED_VERSION = 3


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = request_topics(broker, request.topics, by_id=False)
    coord, coord_error = coordinator_for(broker, request.group_id)
    if not broker.acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        coord, coord_error, denied = None, E.transactional_id_authorization_failed, set[str]()
    else:
        coord, coord_error, denied = authorize(broker, ctx, request.group_id, coord, coord_error, topics)
    known, errors, order = sort_partitions(broker, coord, coord_error, topics, denied)
    if coord is not None and known:
        req = OffsetCommitRequestData(request.group_id, getattr(request, "member_id", ""),
                                      getattr(request, "group_instance_id", None),
                                      getattr(request, "generation_id", -1), known)
        results: list[PartitionError] = await coord.txn_commit_offsets(req, request.producer_id,
                                                                       request.producer_epoch)
        record_results(errors, order, results,
                       lambda error: fenced_error(error, ctx.api_version, PRODUCER_FENCED_VERSION))
    return {"throttle_time": 0, "topics": response_topics(order, errors)}
