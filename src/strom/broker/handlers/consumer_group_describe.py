"""ConsumerGroupDescribe (69): a consumer-protocol group (KIP-848) with its group epoch, assignment
epoch, assignor and members (member epochs, subscriptions, current and target assignments).
GROUP_ID_NOT_FOUND for an unknown group or a classic one (DescribeGroups describes those)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # member_type (v1): which protocol the member speaks


def _failed(group_id: str, error: E, message: str | None = None) -> dict[str, Any]:
    return {"group_id": group_id, "error_code": error, "error_message": message, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    metadata = broker.metadata
    if "consumer" not in broker.config.group_coordinator_rebalance_protocols:
        # Not offered (group.coordinator.rebalance.protocols): each group answers UNSUPPORTED_VERSION.
        return {"throttle_time": 0, "groups": [_failed(g, E.unsupported_version) for g in request.group_ids]}
    groups = []

    def topic_partitions(assignment: dict[uuid.UUID, tuple[int, ...]]) -> dict[str, Any]:
        out = []
        for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])):
            info = metadata.topic_by_id(topic_id)
            out.append({"topic_id": topic_id, "topic_name": info.name if info is not None else "",
                        "partitions": list(parts)})
        return {"topic_partitions": out}

    for group_id in request.group_ids:
        if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_failed(group_id, E.group_authorization_failed))
            continue
        coord, error = coordinator_for(broker, group_id)
        if coord is None:
            groups.append(_failed(group_id, error))
            continue
        d = coord.describe_consumer_group(group_id)
        if d.error is not E.none:
            groups.append(_failed(group_id, d.error, d.error_message))
            continue
        if acls.enabled:
            # Kafka: a group whose members use topics the principal may not describe is not shown.
            topics = {n for m in d.members for n in m.subscribed_topic_names}
            topics |= {info.name for m in d.members for t in (*m.assignment, *m.target_assignment)
                       if (info := metadata.topic_by_id(t)) is not None}
            if acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics):
                groups.append(_failed(group_id, E.topic_authorization_failed,
                                      "The group has subscribed topics that are not authorized."))
                continue
        groups.append({
            "group_id": d.group_id, "error_code": E.none, "error_message": None, "group_state": d.state,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor_name,
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": topic_partitions(m.assignment),
                "target_assignment": topic_partitions(m.target_assignment),
                "member_type": CLASSIC_MEMBER if m.uses_classic_protocol else CONSUMER_MEMBER,
            } for m in d.members],
            "authorized_operations": acls.authorized_operations(ctx, ResourceType.GROUP, group_id)
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
        })
    return {"throttle_time": 0, "groups": groups}
