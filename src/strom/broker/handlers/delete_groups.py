"""DeleteGroups (42): delete Empty groups and their committed offsets (tombstones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.runtime import coordinator_of
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = coordinator_of(broker)
    names = list(request.groups_names)
    if coord is None:
        results = [(g, E.coordinator_not_available) for g in names]
    else:
        results = await coord.delete_groups(names)
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": e} for g, e in results]}
