"""One module per Kafka API. Each module declares API_KEY, MIN_VERSION, MAX_VERSION and

    async def handle(broker: Broker, ctx: RequestContext, request) -> dict | None

returning the response fields as a version-independent dict (None: no response, e.g. acks=0).
A hot-path handler may instead be a plain function that returns the dict when it can answer at
once and an awaitable only when it must wait (a long-poll, an fsync): the connection then skips
the Task it would otherwise create per request.
The registry below finds the modules, so adding an API is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Result = dict[str, Any] | None
Handler = Callable[[Any, Any, Any], Awaitable[Result] | Result]
FrameHandler = Callable[[Any, Any, bytes | bytearray, int], Awaitable[Result] | Result]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    # Optional: called with the raw frame and where its body starts before the body is decoded; it
    # answers (a result or an awaitable, as ``handle``) or returns None for ``handle`` to serve it.
    handle_frame: FrameHandler | None = None


def discover() -> dict[int, ApiHandler]:
    table: dict[int, ApiHandler] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        key = getattr(module, "API_KEY", None)
        if key is None:
            continue
        table[key] = ApiHandler(key, info.name, module.MIN_VERSION, module.MAX_VERSION, module.handle,
                                getattr(module, "handle_frame", None))
    return table
