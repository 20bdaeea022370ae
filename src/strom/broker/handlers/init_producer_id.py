"""InitProducerId (22): producer ids for idempotent producers (transactions are not supported yet)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
CLUSTER_AUTHORIZATION_FAILED = 31


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        # No transaction coordinator yet: refuse clearly rather than pretend.
        return {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    acls = broker.acls
    if acls.enabled and not (acls.cluster_allowed(ctx, AclOperation.IDEMPOTENT_WRITE, audit_denial=False)
                             or acls.any_allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
        acls.cluster_allowed(ctx, AclOperation.IDEMPOTENT_WRITE)  # the audit line
        return {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                "producer_epoch": -1}
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and epoch >= 0 and epoch < 32767:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    return {"throttle_time": 0, "error_code": 0, "producer_id": broker.metadata.allocate_producer_id(),
            "producer_epoch": 0}
