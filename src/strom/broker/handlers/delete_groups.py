"""DeleteGroups (42): delete Empty groups and their committed offsets (tombstones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    errors: dict[str, E] = {}
    mine = []
    coord = None
    for g in request.groups_names:
        if not broker.acls.allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, g):
            errors[g] = E.group_authorization_failed
            continue
        found, errors[g] = coordinator_for(broker, g)
        if found is not None:
            coord = found
            mine.append(g)
    if coord is not None:
        errors.update(await coord.delete_groups(mine))
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": errors[g]} for g in request.groups_names]}
