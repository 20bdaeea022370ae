"""One client connection: frames in, handler calls, responses out in request order.

Kafka's contract is that responses on a connection leave in the order the requests arrived
(librdkafka pipelines requests). Each request becomes a slot in ``_pending``; slots are written out
from the front as they complete, so a long-polling fetch holds back only what came after it.

As Kafka's Selector does, a connection that has neither received nor sent anything for
``connections.max.idle.ms`` is closed (one that still owes an answer is not idle), and a failed SASL
authentication is answered and closed only ``connection.failed.authentication.delay.ms`` later,
on a timer: the connection reads nothing meanwhile, and the event loop serves everyone else.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from strom.broker.context import ENCODED_BODY, QUOTA_EXEMPT, RequestContext
from strom.protocol import splice, wire
from strom.protocol.build import build
from strom.protocol.splice import BlobSplicer
from strom.security.acl import client_address
from strom.security.authenticator import SaslAuthenticator
from strom.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule, subject_dn, user

if TYPE_CHECKING:
    from strom.broker.acceptor import ConnectionSlot
    from strom.broker.handlers import ApiHandler
    from strom.broker.metrics import BrokerMetrics
    from strom.broker.quota_manager import QuotaManager
    from strom.config import BrokerConfig
    from strom.security.listener import ListenerSecurity
    from strom.security.scram import ScramCredential

log = logging.getLogger("strom.connection")
_ids = itertools.count(1)

# Requests in flight per connection before we stop reading from the socket (bounded memory).
MAX_IN_FLIGHT = 100
_SIZE = struct.Struct(">i")
_SASL_APIS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate


Outgoing = bytes | list[bytes | memoryview] | None  # a frame, a frame in pieces (spliced), or none


class Server(Protocol):
    """What a connection uses of the broker that accepted it. The same object is the context the
    handlers are called with (``handler.handle(server, ctx, request)``); the connection passes it on
    as it is and uses nothing else of it."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def security(self) -> Mapping[str, ListenerSecurity]: ...
    @property
    def connections(self) -> set[KafkaConnection]: ...
    @property
    def handlers(self) -> Mapping[int, ApiHandler]: ...
    @property
    def metrics(self) -> BrokerMetrics: ...
    @property
    def quotas(self) -> QuotaManager: ...
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...
    def api_versions_body(self, error_code: int = 0) -> dict[str, Any]: ...
    def connection_closed(self, connection_id: int) -> None:
        """The connection ``connection_id`` is gone (what it held, e.g. share sessions, ends with it)."""


class _Slot:
    """One request's place in the response order: filled at once, or by its task when it finishes."""

    __slots__ = ("ready", "data", "task")

    def __init__(self, data: Outgoing = None, ready: bool = False) -> None:
        self.ready = ready
        self.data = data
        self.task: asyncio.Task[None] | None = None


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Server, listener: str = "", slot: ConnectionSlot | None = None) -> None:
        self.broker = broker
        self.listener = listener  # the name of the listener this connection was accepted on
        self.slot = slot  # its place in the connection quotas, given back when it closes
        self.id = next(_ids)
        self.decoder = wire.FrameDecoder(broker.config.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = "?"
        self._pending: collections.deque[_Slot] = collections.deque()
        self.memo: dict[str, Any] = {}  # handlers' scratch space for this connection (RequestContext.memo)
        self._paused = False
        self._throttled_until = 0.0  # loop time until which a quota keeps this connection unread
        self._closed = False
        self._auth_failed = False  # a failed SASL login is answered and closed after a delay
        # time.monotonic() of the last bytes read or written, for connections.max.idle.ms
        self.last_active = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None  # the idle check, or the delayed close
        # Security: None on PLAINTEXT/SSL listeners; on a SASL listener the state of its login, and
        # until then frames are capped at sasl.server.max.receive.size.
        security = broker.security.get(listener)
        self.authenticator: SaslAuthenticator | None = None
        # Who this connection acts as (the authorizer will check it): the SASL user, the mapped
        # certificate subject on an SSL listener with client authentication, else User:ANONYMOUS.
        self.principal: KafkaPrincipal = ANONYMOUS
        self.principal_name = str(ANONYMOUS)  # its text, "User:alice", as requests carry it
        self._authenticated = False
        if security is not None and security.uses_sasl:
            self.authenticator = SaslAuthenticator(security, broker.scram_credential)
            self.decoder.max_frame = min(self.decoder.max_frame, security.max_receive)

    # asyncio.BufferedProtocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = client_address(str(peer[0])) if peer else "?"
        self.broker.connections.add(self)
        self.last_active = time.monotonic()
        idle_ms = self.broker.config.connections_max_idle_ms
        if idle_ms >= 0:
            self._timer = asyncio.get_running_loop().call_later(idle_ms / 1000, self._check_idle)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and self.authenticator is None:
            self._principal_from_certificate(ssl_object)

    def _principal_from_certificate(self, ssl_object: Any) -> None:
        """SSL listener: a client certificate names the principal (ssl.principal.mapping.rules)."""
        der = ssl_object.getpeercert(binary_form=True)
        mapper = self.broker.security[self.listener].principal_mapper
        if der is None or mapper is None:
            return
        dn = subject_dn(der)
        try:
            self._set_principal(user(mapper.name_for(dn)))
        except NoMatchingRule as e:
            self.close(str(e))
            return
        log.info("connection %s from %s on listener %s authenticated as %s (certificate %s)",
                 self.id, self.peer, self.listener, self.principal, dn)

    def _set_principal(self, principal: KafkaPrincipal) -> None:
        self.principal, self.principal_name = principal, str(principal)

    @property
    def closing(self) -> bool:
        """Closed, or being closed (a failed login waiting out its delay)."""
        return self._closed or self._auth_failed

    def _check_idle(self) -> None:
        self._timer = None
        if self._closed:
            return
        idle_s = self.broker.config.connections_max_idle_ms / 1000
        now = time.monotonic()
        if self._pending:  # a request is being served (a long-polling fetch, say): not idle
            self.last_active = now
        left = self.last_active + idle_s - now
        if left > 0:
            self._timer = asyncio.get_running_loop().call_later(left, self._check_idle)
            return
        self.close(f"idle for longer than connections.max.idle.ms={self.broker.config.connections_max_idle_ms}",
                   level=logging.INFO)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        self.broker.connection_closed(self.id)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.slot is not None:
            self.slot.release()
        for slot in self._pending:
            if slot.task is not None:
                slot.task.cancel()
        self._pending.clear()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except wire.FrameTooLarge as e:
            if self.authenticator is not None and not self._authenticated:
                self.close(f"a frame larger than sasl.server.max.receive.size={self.decoder.max_frame} "
                           "before SASL authentication")
            else:
                self.close(str(e))
            return
        for frame in frames:
            if self._closed or self._auth_failed:
                return
            self._dispatch(frame)
        if len(self._pending) >= MAX_IN_FLIGHT and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def close(self, reason: str, level: int = logging.WARNING) -> None:
        if not self._closed:
            log.log(level, "closing connection %s from %s: %s", self.id, self.peer, reason)
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    # request processing
    def _dispatch(self, frame: bytes | bytearray) -> None:
        auth = self.authenticator
        if auth is not None and auth.raw_tokens:
            self._raw_token(auth, frame)
            return
        try:
            prefix = wire.read_prefix(frame)
        except wire.BadRequest as e:
            self.close(str(e))
            return
        handler = self.broker.handlers.get(prefix.api_key)
        if handler is None:
            self.close(f"unknown api key {prefix.api_key}")
            return
        if auth is not None and not auth.allows(prefix.api_key):
            # Not served, not even answered: Kafka closes an unauthenticated (or expired) session.
            why = "after the SASL session expired" if auth.principal is not None else "before SASL authentication"
            self.close(f"{handler.name} request {why} on listener {self.listener}")
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
        frame_handler = handler.handle_frame
        request: Any = None
        try:
            if frame_handler is not None:  # it may answer from the bytes; the body is decoded if not
                header, body_start = wire.decode_header(prefix, frame)
            else:
                header, request = wire.decode_request(prefix, frame)
        except wire.BadRequest as e:
            self.close(str(e))
            return
        ctx = RequestContext(prefix.api_key, prefix.api_version, prefix.correlation_id, header.client_id,
                             self.client_host, self.id, self.listener, self.principal_name, auth,
                             size=len(frame), memo=self.memo)
        started = self.broker.metrics.clock()
        try:
            result = frame_handler(self.broker, ctx, frame, body_start) if frame_handler is not None else None
            if result is None:
                if request is None:
                    try:
                        _, request = wire.decode_request(prefix, frame)
                    except wire.BadRequest as e:
                        self.close(str(e))
                        return
                result = handler.handle(self.broker, ctx, request)
            if not inspect.isawaitable(result):
                # Answered without waiting: no Task, the response is queued on this loop turn.
                out = self._respond(ctx, result, started)
                if auth is not None and auth.failed and prefix.api_key in _SASL_APIS:
                    self._authentication_failed(out)
                    return
                self._complete_now(out)
                if auth is not None and prefix.api_key in _SASL_APIS:
                    self._after_sasl_step(auth)
                return
        except Exception as exc:
            self._failed(exc)
            return
        slot = _Slot()
        self._pending.append(slot)
        slot.task = asyncio.ensure_future(self._finish(slot, ctx, result, started))

    async def _finish(self, slot: _Slot, ctx: RequestContext, pending: Awaitable[dict[str, Any] | None],
                      started: float) -> None:
        try:
            slot.data = self._respond(ctx, await pending, started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)
            return
        slot.ready = True
        # Written from here, on the turn the handler finished: not one loop turn later from a callback.
        self._flush()

    def _respond(self, ctx: RequestContext, result: dict[str, Any] | None, started: float) -> Outgoing:
        self.broker.metrics.request_done(ctx.api_key, started)
        if result is None:
            return None
        blobs: BlobSplicer | None = result.pop(splice.RESULT_KEY, None)
        exempt = result.pop(QUOTA_EXEMPT, False)
        encoded = result.pop(ENCODED_BODY, None)
        if encoded is not None:  # the handler encoded the body itself (no blobs, no quota: it checked)
            return wire.encode_response_body(ctx.api_key, ctx.api_version, ctx.correlation_id, encoded)
        # Encoded from the dict itself: the same bytes as build() + encode_response, without
        # building the entities first (the larger cost for many-partition responses).
        frame = wire.encode_response_dict(ctx.api_key, ctx.api_version, ctx.correlation_id, result)
        out: Outgoing = frame
        if blobs:
            out = blobs.splice(frame, compact=wire.response_class(ctx.api_key, ctx.api_version).__flexible__)
        quotas = self.broker.quotas
        if quotas.active and not exempt:
            # A response whose blobs were all small enough to stay in the frame is the frame alone.
            size = sum(len(p) for p in cast(list[bytes], out)) if isinstance(out, list) else len(frame)
            now = self.broker.metrics.clock()
            delay = quotas.throttle(ctx, size, now - started, now)
            if delay > 0:
                # The client is told how long to wait (KIP-219) and is not read from until then.
                result["throttle_time"] = max(delay, int(result.get("throttle_time") or 0))
                frame = wire.encode_response_dict(ctx.api_key, ctx.api_version, ctx.correlation_id, result)
                out = frame if not blobs else blobs.splice(
                    frame, compact=wire.response_class(ctx.api_key, ctx.api_version).__flexible__)
                self._throttle(delay)
        return out

    def _throttle(self, delay_ms: int) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + delay_ms / 1000
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self.transport is not None and not self._closed:
            self.transport.pause_reading()
        loop.call_at(until, self._unthrottle)

    def _unthrottle(self) -> None:
        if asyncio.get_running_loop().time() < self._throttled_until - 0.001:
            return  # a later throttle extended it; its own call comes
        self._throttled_until = 0.0
        if not self._paused and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def _raw_token(self, auth: SaslAuthenticator, frame: bytes | bytearray) -> None:
        """After a v0 SaslHandshake the tokens travel as bare size-prefixed frames."""
        result = auth.authenticate(bytes(frame))
        if auth.failed:
            self._authentication_failed(None)  # v0 has no error answer: the connection just closes
            return
        if result.error_code == 0:
            self._complete_now(_SIZE.pack(len(result.auth_bytes)) + result.auth_bytes)
        self._after_sasl_step(auth)

    def _authentication_failed(self, answer: Outgoing) -> None:
        """Answer a failed SASL step and close, connection.failed.authentication.delay.ms after the
        failure (Kafka's delayed close): a password guesser gets one try per delay and connection,
        and nothing more is read from it meanwhile. A timer, not a wait: others are served."""
        self._auth_failed = True
        reason = f"SASL authentication failed on listener {self.listener}"
        delay_ms = self.broker.config.connection_failed_authentication_delay_ms
        if delay_ms <= 0:
            if answer is not None:
                self._complete_now(answer)
            self.close(reason)  # the answer is sent first
            return
        log.info("connection %s from %s: SASL authentication failed on listener %s; answering and closing in "
                 "%d ms (connection.failed.authentication.delay.ms)", self.id, self.peer, self.listener, delay_ms)
        if self.transport is not None:
            self.transport.pause_reading()
        slot = _Slot()  # its place in the response order, filled when the delay is over
        self._pending.append(slot)
        due = time.monotonic() + delay_ms / 1000

        def answer_and_close() -> None:
            self._timer = None
            if self._closed:
                return
            left = due - time.monotonic()
            if left > 0:  # the loop's timers keep a coarser clock and may come a little early
                self._timer = asyncio.get_running_loop().call_later(left, answer_and_close)
                return
            slot.data, slot.ready = answer, True
            self._flush()
            self.close(reason)

        if self._timer is not None:
            self._timer.cancel()  # the idle check: this connection closes anyway
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, answer_and_close)

    def _after_sasl_step(self, auth: SaslAuthenticator) -> None:
        if auth.failed:
            self._authentication_failed(None)
        elif auth.principal is not None and not self._authenticated:
            self._authenticated = True
            self._set_principal(auth.principal)  # re-authentication keeps it (the authenticator checks)
            self.decoder.max_frame = self.broker.config.socket_request_max_bytes
            log.info("connection %s from %s on listener %s authenticated as %s", self.id, self.peer,
                     self.listener, auth.principal)

    def _complete_now(self, data: Outgoing) -> None:
        self._pending.append(_Slot(data, ready=True))
        self._flush()

    def _failed(self, exc: BaseException) -> None:
        log.error("handler failed on connection %s", self.id, exc_info=exc)
        self.close(f"internal error: {exc!r}")

    def _flush(self) -> None:
        pending = self._pending
        transport = self.transport
        wrote = False
        while pending and pending[0].ready:
            data = pending.popleft().data
            if data is not None and transport is not None and not self._closed:
                wrote = True
                if type(data) is list:
                    transport.writelines(data)
                else:
                    transport.write(cast(bytes, data))
        if wrote:
            self.last_active = time.monotonic()
        if self._paused and len(pending) < MAX_IN_FLIGHT // 2 and transport is not None and not self.closing:
            self._paused = False
            if not self._throttled_until:
                transport.resume_reading()
