"""TxnOffsetCommit (28): offsets written to __consumer_offsets inside the producer's transaction;
the group coordinator applies them when the COMMIT marker reaches that partition (an ABORT drops
them). Sent to the group coordinator, after AddOffsetsToTxn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.offset_commit import authorize, response_topics, sort_partitions
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
    coord, coord_error = coordinator_for(broker, request.group_id)
    if not broker.acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        coord, coord_error, denied = None, E.transactional_id_authorization_failed, set[str]()
    else:
        coord, coord_error, denied = authorize(broker, ctx, request.group_id, coord, coord_error, request.topics)
    known, errors, order = sort_partitions(broker, coord, coord_error, request.topics, denied)
    if coord is not None and known:
        req = OffsetCommitRequestData(request.group_id, getattr(request, "member_id", ""),
                                      getattr(request, "group_instance_id", None),
                                      getattr(request, "generation_id", -1), known)
        results: list[PartitionError] = await coord.txn_commit_offsets(req, request.producer_id,
                                                                       request.producer_epoch)
        errors.update({(r.topic, r.partition): fenced_error(r.error, ctx.api_version, PRODUCER_FENCED_VERSION)
                       for r in results})
    return {"throttle_time": 0, "topics": response_topics(order, errors)}
