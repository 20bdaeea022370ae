"""AddOffsetsToTxn (25): the group's __consumer_offsets partition joins the transaction, so that
the offsets sent with TxnOffsetCommit are committed (or dropped) by its marker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.topics import TopicError
from strom.coordinator.group_runtime import GROUP_METADATA_TOPIC_NAME, coordinator_of
from strom.coordinator.txn_runtime import fenced_error, txn_coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4
PRODUCER_FENCED_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": E.transactional_id_authorization_failed}
    if not acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed}
    coord, error = txn_coordinator_for(broker, request.transactional_id)
    groups = coordinator_of(broker)
    if coord is not None and groups is None:
        error = E.coordinator_not_available
    if coord is None or groups is None:
        return {"throttle_time": 0, "error_code": error}
    try:  # the offsets topic exists before its partition joins a transaction
        ready = groups.find_coordinator()
    except TopicError:  # too few brokers for it yet: the producer asks again
        ready = False
    if not ready:
        return {"throttle_time": 0, "error_code": E.coordinator_not_available}
    tp = (GROUP_METADATA_TOPIC_NAME, groups.partition_for(request.group_id))
    error = await coord.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch, [tp])
    return {"throttle_time": 0, "error_code": fenced_error(error, ctx.api_version, PRODUCER_FENCED_VERSION)}
