"""AlterConfigs (33): replace the whole set of overrides of a topic or a dynamic broker config level.

Entries with a null value are dropped (so a config left out goes back to its default). Errors use
Kafka's codes: INVALID_CONFIG for unknown names and bad values, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REQUEST for another broker's id, an unsupported resource type or a resource given twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.config_admin import INVALID_REQUEST, ConfigChangeError

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


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
            configs = {c.name: c.value for c in r.configs if c.value is not None}
            admin.alter(r.resource_type, r.resource_name, configs, bool(request.validate_only))
        except ConfigChangeError as e:
            entry.update(error_code=e.error_code, error_message=e.message)
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
