"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on single configs of a topic or a
dynamic broker config level (resource name "" for the cluster-wide defaults, or this broker's id).

APPEND and SUBTRACT work on list configs (cleanup.policy) and start from the current override, else
the effective value. The result is validated as a whole, persisted and applied live; validate_only
checks without changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.config_admin import INVALID_REQUEST, ConfigChangeError

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    admin = broker.config_admin
    keys = [(r.resource_type, r.resource_name) for r in request.resources]
    responses = []
    for r in request.resources:
        entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                                 "resource_name": r.resource_name}
        try:
            if keys.count((r.resource_type, r.resource_name)) > 1:
                raise ConfigChangeError(INVALID_REQUEST, f"Duplicate resource {r.resource_name!r} in the request")
            ops = [(c.name, int(c.config_operation), c.value) for c in r.configs]
            configs = admin.apply_operations(r.resource_type, r.resource_name, ops)
            admin.alter(r.resource_type, r.resource_name, configs, bool(request.validate_only))
        except ConfigChangeError as e:
            entry.update(error_code=e.error_code, error_message=e.message)
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
