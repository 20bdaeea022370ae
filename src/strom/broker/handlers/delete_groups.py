"""DeleteGroups (42): delete Empty groups and their committed offsets (tombstones). A share group's
share partitions' state is deleted first, at their share coordinators (Kafka's
deleteShareGroups: persister deleteState, then the group); a share group whose state could not
all be deleted stays, with that error, so a new group of that id never finds old state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_offsets import delete_share_state, offsets_change
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
        for g in list(mine):
            error = await _delete_share_state(broker, ctx, g)
            if error is not E.none:
                errors[g] = error
                mine.remove(g)
        if mine:
            errors.update(await coord.delete_groups(mine))
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": errors[g]} for g in request.groups_names]}


async def _delete_share_state(broker: Broker, ctx: RequestContext, group_id: str) -> E:
    """NONE when ``group_id`` is not a share group, or its share partitions' state is deleted."""
    change = offsets_change(broker, ctx, group_id, AclOperation.DELETE)
    if isinstance(change, E):
        return E.none  # not served here as a share group: the coordinator answers for it
    initialized = change.coordinator.share_initialized(group_id)
    if initialized is None:
        return E.none  # not a share group
    error, _ = change.coordinator.share_offsets_error(group_id)
    if error is not E.none:
        return error  # NON_EMPTY_GROUP: nothing is deleted
    errors = await delete_share_state(change, group_id, [(t, p) for t, ps in initialized.items() for p in ps])
    return next((e for e in errors.values() if e is not E.none), E.none)
