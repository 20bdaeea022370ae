"""EndTxn (26): commit or abort the producer's transaction. Answered once PrepareCommit or
PrepareAbort is written; the markers and the Complete state follow in the background.

v5 belongs to transactions V2 (KIP-890 part 2): the coordinator bumps the producer epoch at the end
of every transaction and answers the new producer id and epoch. strom finalizes no
``transaction.version`` and runs transactions V1 (the epoch stays, partitions are added explicitly),
so v4 stays the last version served; clients send v5 only when transaction.version 2 is finalized."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.txn_runtime import fenced_error, txn_coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4
PRODUCER_FENCED_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": E.transactional_id_authorization_failed}
    coord, error = txn_coordinator_for(broker, request.transactional_id)
    if coord is not None:
        error = await coord.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                    request.committed)
    return {"throttle_time": 0, "error_code": fenced_error(error, ctx.api_version, PRODUCER_FENCED_VERSION)}
