"""SyncGroup (14): the leader hands in the assignment; every member gets its own share back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.api import SyncGroupRequestData, SyncGroupResult
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(SyncGroupResult(E.group_authorization_failed))
    coord, error = coordinator_for(broker, request.group_id)
    if coord is None:
        return _response(SyncGroupResult(error))
    req = SyncGroupRequestData(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return _response(await coord.sync_group(req))


def _response(r: SyncGroupResult) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": r.error, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name, "assignment": r.assignment}
