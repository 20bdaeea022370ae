"""LeaveGroup (13): one member (v0-2) or a batch, by member id or group.instance.id (v3+)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.api import MemberIdentity
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version < 3:
        leaving = [MemberIdentity(request.member_id)]
    else:
        leaving = [MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                   for m in request.members]
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed, "members": []}
    coord, error = coordinator_for(broker, request.group_id)
    if coord is None:
        return {"throttle_time": 0, "error_code": error, "members": []}
    result = await coord.leave_group(request.group_id, leaving)
    error = result.error
    if ctx.api_version < 3 and error is E.none and result.members:
        error = result.members[0][1]  # one member: its error is the answer
    return {
        "throttle_time": 0,
        "error_code": error,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": e}
                    for m, e in result.members],
    }
