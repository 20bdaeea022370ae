"""AlterConfigs (33): replace the whole set of overrides of a topic or a dynamic broker config level.

Entries with a null value are dropped (so a config left out goes back to its default). Errors use
Kafka's codes: INVALID_CONFIG for unknown names and bad values, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REQUEST for another broker's id, an unsupported resource type or a resource given twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.config_admin import alter_resources

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    return alter_resources(broker.config_admin, broker.acls, ctx, request,
                           lambda r: {c.name: c.value for c in r.configs if c.value is not None})
