"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has, and their iterations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.security import scram_admin

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    users = None if request.users is None else [u.name for u in request.users]
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "results": scram_admin.describe(users, broker.credentials.all())}
