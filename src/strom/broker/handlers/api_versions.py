"""ApiVersions (18): the API ranges this broker serves."""

from __future__ import annotations

from typing import Any

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker: Any, ctx: Any, request: Any) -> dict[str, Any]:
    return broker.api_versions_body()
