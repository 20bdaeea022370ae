"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on single configs of a topic or a
dynamic broker config level (resource name "" for the cluster-wide defaults, or this broker's id).

APPEND and SUBTRACT work on list configs (cleanup.policy) and start from the current override, else
the effective value. The result is validated as a whole, persisted and applied live; validate_only
checks without changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.config_admin import alter_resources

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    admin = broker.config_admin
    return alter_resources(admin, broker.acls, ctx, request, lambda r: admin.apply_operations(
        r.resource_type, r.resource_name, [(c.name, int(c.config_operation), c.value) for c in r.configs]))
