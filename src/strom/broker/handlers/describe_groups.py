"""DescribeGroups (15): state, protocol and members (with metadata and assignment once Stable)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = []
    acls = broker.acls
    for group_id in request.groups:
        if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({"group_id": group_id, "error_code": E.group_authorization_failed, "group_state": "",
                           "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        coord, error = coordinator_for(broker, group_id)
        if coord is None:
            groups.append({"group_id": group_id, "error_code": error, "group_state": "",
                           "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        d = coord.describe_group(group_id)
        entry: dict[str, Any] = {
            "error_code": d.error,
            "group_id": d.group_id,
            "group_state": d.state,
            "protocol_type": d.protocol_type,
            "protocol_data": d.protocol_data,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment} for m in d.members],
            "authorized_operations": acls.authorized_operations(ctx, ResourceType.GROUP, group_id)
            if getattr(request, "include_authorized_operations", False) else AUTHORIZED_OPERATIONS_OMITTED,
        }
        if d.state == "Dead" and ctx.api_version >= 6:
            # v6 (KIP-1043) reports a missing group as an error instead of a "Dead" group.
            entry.update(error_code=E.group_id_not_found,
                         error_message=d.dead_reason or f"Group {group_id} not found.")
        groups.append(entry)
    return {"throttle_time": 0, "groups": groups}
