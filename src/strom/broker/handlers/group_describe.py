"""What ConsumerGroupDescribe (69) and ShareGroupDescribe (77) share: finding each group's
coordinator under the DESCRIBE ACL on the group and on its topics, an error entry, and assignments
as Kafka lists them (topic id and name, partitions). Not a handler itself (no API_KEY)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import GroupCoordinatorRuntime, coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
TOPICS_NOT_AUTHORIZED = "The group has subscribed topics that are not authorized."


def failed(group_id: str, error: E, message: str | None = None) -> dict[str, Any]:
    return {"group_id": group_id, "error_code": error, "error_message": message, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def topic_partitions(broker: Broker, assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[str, Any]:
    out = []
    for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])):
        info = broker.metadata.topic_by_id(topic_id)
        out.append({"topic_id": topic_id, "topic_name": info.name if info is not None else "",
                    "partitions": list(parts)})
    return {"topic_partitions": out}


def describe_each(broker: Broker, ctx: RequestContext, request: Any,
                  describe: Callable[[GroupCoordinatorRuntime, str], Any],
                  topics_of: Callable[[Any], set[str]],
                  entry: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each requested group: ``describe`` it at its coordinator, then (when ACLs are on) refuse it
    if the principal may not describe every topic ``topics_of`` it names, as Kafka does; else
    ``entry`` of it, with its authorized operations when asked."""
    acls = broker.acls
    groups = []
    for group_id in request.group_ids:
        if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(failed(group_id, E.group_authorization_failed))
            continue
        coord, error = coordinator_for(broker, group_id)
        if coord is None:
            groups.append(failed(group_id, error))
            continue
        d = describe(coord, group_id)
        if d.error is not E.none:
            groups.append(failed(group_id, d.error, d.error_message))
            continue
        if acls.enabled and acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics_of(d)):
            groups.append(failed(group_id, E.topic_authorization_failed, TOPICS_NOT_AUTHORIZED))
            continue
        groups.append({**entry(d), "group_id": group_id, "error_code": E.none, "error_message": None,
                       "authorized_operations": acls.authorized_operations(ctx, ResourceType.GROUP, group_id)
                       if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED})
    return groups
