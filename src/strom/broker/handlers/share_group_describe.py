"""ShareGroupDescribe (77): a share group with its epochs and members (their subscriptions and
partitions). GROUP_ID_NOT_FOUND for an unknown group or one of another type."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
ASSIGNOR = "simple"  # Kafka's SimpleAssignor, the share groups' only one


def _failed(group_id: str, error: E, message: str | None = None) -> dict[str, Any]:
    return {"group_id": group_id, "error_code": error, "error_message": message, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    metadata = broker.metadata

    def topic_partitions(assignment: dict[uuid.UUID, tuple[int, ...]]) -> dict[str, Any]:
        out = []
        for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])):
            info = metadata.topic_by_id(topic_id)
            out.append({"topic_id": topic_id, "topic_name": info.name if info is not None else "",
                        "partitions": list(parts)})
        return {"topic_partitions": out}

    groups = []
    for group_id in request.group_ids:
        if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_failed(group_id, E.group_authorization_failed))
            continue
        coord, error = coordinator_for(broker, group_id)
        if coord is None:
            groups.append(_failed(group_id, error))
            continue
        d = coord.describe_share_group(group_id)
        if d.error is not E.none:
            groups.append(_failed(group_id, d.error, d.error_message))
            continue
        groups.append({
            "group_id": group_id, "error_code": E.none, "error_message": None, "group_state": d.state,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": ASSIGNOR,
            "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "assignment": topic_partitions(m.assignment)} for m in d.members],
            "authorized_operations": acls.authorized_operations(ctx, ResourceType.GROUP, group_id)
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
        })
    return {"throttle_time": 0, "groups": groups}
