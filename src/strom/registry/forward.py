"""Writes on a broker that does not lead ``_schemas``: the request is forwarded, as it came (method,
path, query, body, credentials), to the registry of the broker that leads it, and its answer given.
Before answering, this broker catches up to the offset the leader's answer names, so the write is
readable here at once. While no leader is known, or the one named does not answer or no longer
leads, the request is tried again (locally first: this broker may have become the leader) until
``timeout_s`` has passed; a forwarded request is never forwarded again."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from yarl import URL

from strom.registry import errors
from strom.registry.store import NotWriter, Store

log = logging.getLogger("strom.registry")

FORWARDED = "X-Strom-Forwarded"  # on a request one registry forwards to another
OFFSET = "X-Strom-Schemas-Offset"  # on the answer: the leader's state reaches this offset of _schemas
NOT_WRITER = "X-Strom-Not-Writer"  # on the answer to a forwarded write the receiver cannot make
_PASSED_ON = ("Authorization", "Content-Type", "Accept")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def pick(urls: tuple[str, ...]) -> str:
    """An http:// URL when the leader has one (no certificate to check between brokers), else its first."""
    return next((u for u in urls if u.startswith("http://")), urls[0])


class Forwarder:
    def __init__(self, store: Store, timeout_s: float = 30.0, tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.timeout_s = timeout_s
        self.tls = tls  # for https:// registries of other brokers
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.tls or True),
                                                  auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        forwarded = FORWARDED in request.headers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        delay = 0.02
        while True:
            try:
                response = await handler(request)
                if forwarded:
                    response.headers[OFFSET] = str(self.store.next_offset)
                return response
            except NotWriter as e:
                if forwarded:  # the forwarder asks again where the leader is now
                    body = {"error_code": 50004, "message": "this broker does not lead _schemas"}
                    return web.Response(text=json.dumps(body), status=500, content_type="application/json",
                                        headers={NOT_WRITER: "1"})
                last = "no leader of _schemas with a schema registry is known"
                if e.urls:
                    url = pick(e.urls)
                    try:
                        answer = await self._forward(request, url, deadline - loop.time())
                    except (aiohttp.ClientError, OSError, TimeoutError) as fail:
                        answer, last = None, f"the registry at {url} did not answer: {fail!r}"
                    else:
                        last = f"the registry at {url} does not lead _schemas"
                    if answer is not None:
                        return answer
                if loop.time() + delay > deadline:
                    raise errors.RegistryError(500, 50003, f"could not forward the write: {last}") from None
                await asyncio.sleep(delay)
                delay = min(2 * delay, 0.5)

    async def _forward(self, request: web.Request, url: str, timeout_s: float) -> web.Response | None:
        """The leader's answer, or None when the registry at ``url`` does not lead ``_schemas``."""
        headers = {h: request.headers[h] for h in _PASSED_ON if h in request.headers}
        headers[FORWARDED] = "1"
        target = URL(url.rstrip("/") + request.raw_path, encoded=True)
        body = await request.read()
        async with self._client().request(request.method, target, data=body, headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=max(0.1, timeout_s))) as resp:
            data = await resp.read()
            if NOT_WRITER in resp.headers:
                return None
            offset = resp.headers.get(OFFSET)
        if offset is not None and not await self.store.caught_up_to(int(offset), max(0.1, timeout_s)):
            log.warning("schema registry: a write forwarded to %s is not readable here yet (offset %s)", url, offset)
        return web.Response(body=data, status=resp.status,
                            content_type=resp.content_type or "application/json")
