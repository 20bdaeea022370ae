"""The registry's HTTP listeners: the API app served on sockets bound by the caller, beside the
admin listener, in the broker's loop. ``start`` binds and serves at once (requests wait for the
load); the load of ``_schemas`` runs in the background once the broker serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from strom.http_listeners import Bind, HttpListener, bind_all
from strom.registry.app import make_app
from strom.registry.forward import Forwarder
from strom.registry.ops import Registry
from strom.registry.store import SchemaLog, Store

log = logging.getLogger("strom.registry")


class RegistryServer:
    def __init__(self, listeners: Sequence[HttpListener], schema_log: SchemaLog, bind: Bind,
                 tls: ssl.SSLContext | None = None, middlewares: Sequence[Any] = (),
                 client_tls: ssl.SSLContext | None = None) -> None:
        """``client_tls``: to reach other brokers' https:// registries when forwarding writes."""
        self.listeners = listeners
        self.bind = bind  # binds or raises the broker's one-line error naming the listener
        self.tls = tls
        self.store = Store(schema_log)
        self.registry = Registry(self.store)
        self.forwarder = Forwarder(self.store, self.store.timeout_s, client_tls)
        self.app = make_app(self.registry, middlewares, self.forwarder.middleware)
        self.addresses: list[str] = []
        self._runner: web.AppRunner | None = None
        self._loader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        bound = bind_all(self.listeners, self.bind, "schema registry listener")
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        for listener, sockets in bound:
            tls = self.tls if listener.name == "HTTPS" else None
            for sock in sockets:
                await web.SockSite(runner, sock, ssl_context=tls).start()
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                url = f"{'https' if tls is not None else 'http'}://{shown}:{port}"
                self.addresses.append(url)
                log.info("schema registry listening on %s", url)
        self._loader = asyncio.ensure_future(self._load())

    async def _load(self) -> None:
        try:
            await self.store.load()
        except Exception:
            log.exception("schema registry: could not load _schemas")

    async def stop(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
            self._loader = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.forwarder.close()
