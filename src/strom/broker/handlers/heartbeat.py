"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed}
    coord, error = coordinator_for(broker, request.group_id)
    if coord is None:
        return {"throttle_time": 0, "error_code": error}
    error = coord.heartbeat(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                            request.generation_id)
    return {"throttle_time": 0, "error_code": error}
