"""One client connection: frames in, handler calls, responses out in request order.

Kafka's contract is that responses on a connection leave in the order the requests arrived
(librdkafka pipelines requests). Each request becomes a slot in ``_pending``; slots are written out
from the front as they complete, so a long-polling fetch holds back only what came after it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from typing import TYPE_CHECKING, Any, cast

from strom.broker.context import RequestContext
from strom.protocol import wire
from strom.protocol.build import build

if TYPE_CHECKING:
    from strom.broker.server import Broker

log = logging.getLogger("strom.connection")
_ids = itertools.count(1)

# Requests in flight per connection before we stop reading from the socket (bounded memory).
MAX_IN_FLIGHT = 100


class KafkaConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.decoder = wire.FrameDecoder(broker.config.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._pending: collections.deque[asyncio.Future[bytes | None]] = collections.deque()
        self._paused = False
        self._closed = False

    # asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        for fut in self._pending:
            fut.cancel()
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except wire.FrameTooLarge as e:
            self.close(str(e))
            return
        for frame in frames:
            if self._closed:
                return
            self._dispatch(frame)
        if len(self._pending) >= MAX_IN_FLIGHT and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def close(self, reason: str) -> None:
        if not self._closed:
            log.warning("closing connection %s from %s: %s", self.id, self.peer, reason)
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    # request processing
    def _dispatch(self, frame: bytes) -> None:
        try:
            prefix = wire.read_prefix(frame)
        except wire.BadRequest as e:
            self.close(str(e))
            return
        handler = self.broker.handlers.get(prefix.api_key)
        if handler is None:
            self.close(f"unknown api key {prefix.api_key}")
            return
        if not handler.min_version <= prefix.api_version <= handler.max_version:
            if prefix.api_key == wire.API_VERSIONS_KEY:
                # Fallback rule: answer with a v0 body, UNSUPPORTED_VERSION and our ranges.
                body = self.broker.api_versions_body(error_code=35)
                resp = build(wire.response_class(18, 0), body)
                self._complete_now(wire.encode_response(18, 0, prefix.correlation_id, resp))
                return
            self.close(f"unsupported version {prefix.api_version} of api key {prefix.api_key} ({handler.name})")
            return
        try:
            header, request = wire.decode_request(prefix, frame)
        except wire.BadRequest as e:
            self.close(str(e))
            return
        ctx = RequestContext(prefix.api_key, prefix.api_version, prefix.correlation_id, header.client_id,
                             self.peer.rsplit(":", 1)[0], self.id)
        fut: asyncio.Future[bytes | None] = asyncio.ensure_future(self._run(handler.handle, ctx, request))
        self._pending.append(fut)
        fut.add_done_callback(self._on_done)

    async def _run(self, handle: Any, ctx: RequestContext, request: Any) -> bytes | None:
        started = self.broker.metrics.clock()
        result = await handle(self.broker, ctx, request)
        self.broker.metrics.request_done(ctx.api_key, started)
        if result is None:
            return None
        resp = build(wire.response_class(ctx.api_key, ctx.api_version), result)
        return wire.encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, resp)

    def _complete_now(self, data: bytes) -> None:
        fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        fut.set_result(data)
        self._pending.append(fut)
        self._flush()

    def _on_done(self, fut: asyncio.Future[bytes | None]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            exc = fut.exception()
            log.error("handler failed on connection %s", self.id, exc_info=exc)
            self.close(f"internal error: {exc!r}")
            return
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        transport = self.transport
        while pending and pending[0].done():
            fut = pending.popleft()
            if fut.cancelled() or fut.exception() is not None:
                continue
            data = fut.result()
            if data is not None and transport is not None and not self._closed:
                transport.write(data)
        if self._paused and len(pending) < MAX_IN_FLIGHT // 2 and transport is not None and not self._closed:
            self._paused = False
            transport.resume_reading()
