"""ListGroups (16): every group with its protocol type; state (v4+) and type (v5+) filters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_of
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = coordinator_of(broker)
    if coord is None:
        return {"throttle_time": 0, "error_code": E.coordinator_not_available, "groups": []}
    states = set(getattr(request, "states_filter", ()) or ())
    types = set(getattr(request, "types_filter", ()) or ())
    listed = coord.list_groups(states or None, types or None)
    acls = broker.acls
    if acls.enabled and not acls.cluster_allowed(ctx, AclOperation.DESCRIBE, audit_denial=False):
        # Without DESCRIBE on the cluster, a principal sees the groups it may describe.
        hidden = acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in listed), False)
        listed = [g for g in listed if g.group_id not in hidden]
    return {
        "throttle_time": 0,
        "error_code": E.none,
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
                    "group_type": g.group_type} for g in listed],
    }
