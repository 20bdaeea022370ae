"""Fault injection for brokers that strom.testing starts, driven over a private control channel.

A broker has it only when the process that started it asked for it: ``strom.testing.EmbeddedBroker``
listens on a loopback port of its own and puts ``127.0.0.1:PORT:TOKEN`` (a fresh random token) in
the child's environment under ``STROM_TESTING_CONTROL``. At start the broker reads and removes that
variable, connects out to that port and presents the token; commands then come back on that one
connection. The broker listens on nothing new, no configuration key turns any of this on, and a
broker started without the variable has no control channel and never queues an error.

Commands (one JSON object a line, one JSON answer each):
- ``{"op": "inject_error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "count": 1}``:
  the next ``count`` requests of that API are answered with that error, in that API's own response
  (strom.protocol.error_response), instead of reaching the handler;
- ``{"op": "drop_connections"}``: every client connection is closed (clients reconnect).
When the channel closes (the test process stopped the broker or died) the broker stops.

The hook is the handler table: an API with errors queued gets a wrapping handler, and its own
handler back when the queue is empty, so a broker without injections runs its normal code.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.handlers import ApiHandler, Result
from strom.protocol import wire
from strom.protocol.error_response import error_response
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

log = logging.getLogger("strom.broker.faults")

ENV = "STROM_TESTING_CONTROL"
PRODUCE_KEY = 0


def kafka_name(handler_name: str) -> str:
    """``offset_commit`` -> ``OffsetCommit``: Kafka's name of the API a handler module serves."""
    return "".join(part.capitalize() for part in handler_name.split("_"))


class Connection(Protocol):
    """What fault injection uses of a client connection: its transport, to abort it."""

    @property
    def transport(self) -> asyncio.Transport | None: ...


class Target(Protocol):
    """What fault injection acts on: the broker's handler table (swapped in place), its open
    connections, its services (the injector joins them) and its stop."""

    @property
    def handlers(self) -> dict[int, ApiHandler]: ...
    @property
    def connections(self) -> Collection[Connection]: ...
    @property
    def services(self) -> list[Any]: ...
    def request_stop(self) -> None: ...


def attach_from_environment(broker: Target) -> FaultInjector | None:
    """Give ``broker`` fault injection if (and only if) its parent asked for it in the environment."""
    spec = os.environ.pop(ENV, None)  # not inherited by anything this process starts
    if not spec:
        return None
    host, port, token = spec.rsplit(":", 2)
    injector = FaultInjector(broker.handlers, broker.connections, broker.request_stop, host, int(port), token)
    broker.services.append(injector)
    return injector


class FaultInjector:
    """A broker service (started first, stopped last): the control channel and the error queues.
    ``handlers`` is the broker's handler table itself: an API with errors queued gets a wrapping
    handler in it; ``request_stop`` stops the broker when the control channel closes."""

    def __init__(self, handlers: dict[int, ApiHandler], connections: Collection[Connection],
                 request_stop: Callable[[], None], host: str, port: int, token: str) -> None:
        if host != "127.0.0.1":
            raise ValueError(f"{ENV}: the control channel is loopback only, not {host}")
        self._handlers_table = handlers
        self._connections = connections
        self._request_stop = request_stop
        self.address = (host, port)
        self.token = token
        # api key -> queue of [error code, requests left]; first come, first served.
        self.errors: dict[int, collections.deque[list[int]]] = {}
        self._originals: dict[int, ApiHandler] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        reader, writer = await asyncio.open_connection(*self.address)
        writer.write(json.dumps({"hello": self.token, "pid": os.getpid()}).encode() + b"\n")
        await writer.drain()
        self._writer = writer
        self._task = asyncio.ensure_future(self._serve(reader, writer))
        log.warning("fault injection enabled: this broker was started by strom.testing")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            try:
                answer = self.command(json.loads(line))
            except (ValueError, KeyError, TypeError) as e:
                answer = {"ok": False, "error": str(e)}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        # strom.testing closes the channel to stop the broker, and so does its process ending: a
        # broker started by a test must not outlive it.
        log.info("fault-injection control channel closed: stopping")
        self._request_stop()

    def command(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message["op"]
        if op == "inject_error":
            self.inject_error(str(message["api"]), str(message["error"]), int(message.get("count", 1)))
            return {"ok": True}
        if op == "drop_connections":
            return {"ok": True, "closed": self.drop_connections()}
        raise ValueError(f"unknown command {op!r}")

    # ------------------------------------------------------------------ faults

    def inject_error(self, api: str, error: str, count: int) -> None:
        by_name = {kafka_name(h.name): h for h in self._handlers()}
        handler = by_name.get(api)
        if handler is None:
            raise ValueError(f"unknown api {api!r}; this broker serves {', '.join(sorted(by_name))}")
        try:
            code = ErrorCode[error.lower()]
        except KeyError:
            raise ValueError(f"unknown error {error!r} (Kafka's names, e.g. NOT_LEADER_OR_FOLLOWER)") from None
        if code == ErrorCode.none:
            raise ValueError("NONE is no error: name the error to inject")
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        self.errors.setdefault(handler.api_key, collections.deque()).append([int(code), count])
        if handler.api_key not in self._originals:
            self._originals[handler.api_key] = handler
            self._handlers_table[handler.api_key] = ApiHandler(
                handler.api_key, handler.name, handler.min_version, handler.max_version, self._intercept(handler))
        log.info("injecting %s into the next %d %s requests", code.name.upper(), count, api)

    def drop_connections(self) -> int:
        connections = list(self._connections)
        for conn in connections:
            if conn.transport is not None:
                conn.transport.abort()  # as a network failure: no goodbye, buffered responses lost
        log.info("dropped %d client connections", len(connections))
        return len(connections)

    def _handlers(self) -> list[ApiHandler]:
        return [self._originals.get(key, h) for key, h in self._handlers_table.items()]

    def _intercept(self, original: ApiHandler) -> Any:
        def handle(broker: Any, ctx: RequestContext, request: Any) -> Any:
            queue = self.errors.get(original.api_key)
            if not queue:
                return original.handle(broker, ctx, request)
            entry = queue[0]
            code = entry[0]
            entry[1] -= 1
            if entry[1] == 0:
                queue.popleft()
                if not queue:  # the API gets its own handler back
                    del self.errors[original.api_key]
                    self._handlers_table[original.api_key] = self._originals.pop(original.api_key)
            return self._answer(ctx, request, code)

        return handle

    def _answer(self, ctx: RequestContext, request: Any, code: int) -> Result:
        name = ErrorCode(code).name.upper()
        log.info("answering %s request %d from %s with injected %s", kafka_name(self._name(ctx.api_key)),
                 ctx.correlation_id, ctx.client_id, name)
        if ctx.api_key == PRODUCE_KEY and request.acks == 0:
            return None  # acks=0: the client waits for no answer, so none is sent
        return error_response(request, wire.response_class(ctx.api_key, ctx.api_version), code,
                              f"{name} injected by strom.testing")

    def _name(self, api_key: int) -> str:
        handler = self._originals.get(api_key) or self._handlers_table.get(api_key)
        return handler.name if handler is not None else str(api_key)
