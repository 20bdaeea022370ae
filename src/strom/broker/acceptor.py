"""The Kafka listeners' sockets (Kafka's Acceptor): bound before the logs load, so that an address
already in use stops the broker with one line before it touches its data; accepting once the broker
serves, within the connection quotas (strom.broker.connection_quotas).

An accepted connection from an address over ``max.connections.per.ip`` is closed at once, before a
TLS handshake or any read. At ``max.connections`` (or the listener's own limit) the acceptor holds
the connection it has just accepted and accepts nothing more until another connection closes; the
ones behind it wait in the kernel's listen queue, as with Kafka.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Protocol

from strom.broker.connection_quotas import ConnectionQuotas, normalise_address

if TYPE_CHECKING:
    from strom.config.broker import Listener

log = logging.getLogger("strom.connection")

# The kernel's file table is full: asyncio's servers wait this long before accepting again.
_ACCEPT_RETRY_S = 1.0
_QUIET_S = 60.0  # the same warning about a limit at most this often (per listener or address)


class ListenerBindError(Exception):
    """A listener's address cannot be bound; str() is the one line the broker stops with."""


def bind(what: str, host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address ``host`` resolves to (one for an address),
    as asyncio's create_server binds them, except that a host resolving to IPv6 addresses only
    ([::]) is dual-stack, as in Kafka; ListenerBindError names ``what`` and the port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise ListenerBindError(f"{what} cannot listen on port {port}: host {host} does not resolve "
                                f"({_reason(e)})") from None
    sockets: list[socket.socket] = []
    seen = set()
    # An IPv6 socket takes IPv4 clients too (as ::ffff:a.b.c.d, as Kafka's listeners on [::] do),
    # unless the host also resolves to IPv4 addresses, which get sockets of their own.
    v6_only = any(info[0] == socket.AF_INET for info in infos)
    for family, kind, proto, _, address in infos:
        if (family, address) in seen:
            continue
        seen.add((family, address))
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:
            continue  # e.g. IPv6 switched off in this kernel: the other addresses still count
        sockets.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6_only))
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError as e:
            for s in sockets:
                s.close()
            raise ListenerBindError(f"{what} cannot listen on port {port} of {address[0]}: {_reason(e)}") from None
    if not sockets:
        raise ListenerBindError(f"{what} cannot listen on port {port}: no usable address for host {host}")
    return sockets


def _reason(e: OSError) -> str:
    text = e.strerror or str(e)
    return text[:1].lower() + text[1:]


class ConnectionSlot:
    """One admitted connection's place in the counts; released once, whoever releases it first (the
    connection when it closes, or the acceptor when the connection never got going)."""

    __slots__ = ("_limits", "listener", "address", "_held")

    def __init__(self, limits: ConnectionLimits, listener: str, address: str) -> None:
        self._limits, self.listener, self.address, self._held = limits, listener, address, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limits.released(self)


class OpenConnection(Protocol):
    """What the limits use of an open connection (strom.broker.connection.KafkaConnection)."""

    @property
    def listener(self) -> str: ...
    @property
    def closing(self) -> bool: ...
    @property
    def last_active(self) -> float: ...
    def close(self, reason: str) -> None: ...


class ConnectionLimits:
    """The quotas and the acceptors waiting on them, on the broker's event loop. ``connections`` is
    the broker's set of open connections (read when room must be made)."""

    def __init__(self, quotas: ConnectionQuotas, connections: Collection[OpenConnection]) -> None:
        self.quotas = quotas
        self.connections = connections
        self._waiters: list[asyncio.Future[None]] = []
        self._warned: dict[str, float] = {}

    async def wait_for_slot(self, listener: str) -> None:
        quotas = self.quotas
        if quotas.slot_available(listener):
            return
        if self._quiet(f"listener {listener}"):
            log.warning("listener %s: connection limit reached (%d open on it, %d in all; max.connections=%d, "
                        "listener %d); new connections wait until one closes", listener,
                        quotas.by_listener.get(listener, 0), quotas.total, quotas.max_connections,
                        quotas.listener_limits.get(listener, quotas.max_connections))
        loop = asyncio.get_running_loop()
        while not quotas.slot_available(listener):
            waiter = loop.create_future()
            self._waiters.append(waiter)
            await waiter

    def admit(self, listener: str, peer: str) -> ConnectionSlot | None:
        """The slot of a connection just accepted from ``peer``, or None: close it (per-IP limit)."""
        address = normalise_address(peer)
        if not self.quotas.admit(listener, address):
            if self._quiet(address):
                log.warning("closing a new connection from %s on listener %s: that address already has "
                            "max.connections.per.ip=%d connections", address, listener,
                            self.quotas.limit_for(address))
            return None
        if self.quotas.over_broker_limit():
            self._make_room()
        return ConnectionSlot(self, listener, address)

    def released(self, slot: ConnectionSlot) -> None:
        self.quotas.release(slot.listener, slot.address)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _make_room(self) -> None:
        """A connection on the protected listener took the broker over max.connections: close the
        least recently active connection of another listener (Kafka's Processor does the same)."""
        others = [c for c in self.connections if c.listener != self.quotas.protected_listener and not c.closing]
        if others:
            victim = min(others, key=lambda c: c.last_active)
            victim.close(f"max.connections={self.quotas.max_connections} reached: making room for a connection "
                         f"on the inter-broker listener {self.quotas.protected_listener}")

    def _quiet(self, key: str) -> bool:
        """True when nothing was logged about ``key`` in the last minute (and note this time)."""
        now = time.monotonic()
        if now - self._warned.get(key, -_QUIET_S) < _QUIET_S:
            return False
        if len(self._warned) > 1024:
            self._warned = {k: t for k, t in self._warned.items() if now - t < _QUIET_S}
        self._warned[key] = now
        return True


class Acceptor:
    """Accepts one listener's connections on its sockets and hands each, with its slot in the
    connection limits, to ``protocol`` (which makes the KafkaConnection)."""

    def __init__(self, listener: Listener, sockets: list[socket.socket], limits: ConnectionLimits,
                 protocol: Callable[[ConnectionSlot], asyncio.BaseProtocol], ssl_context: ssl.SSLContext | None,
                 handshake_timeout: float | None) -> None:
        self.listener = listener
        self.sockets = sockets
        self.limits = limits
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    @property
    def serving(self) -> bool:
        return bool(self._tasks) and not self._closed and not any(t.done() for t in self._tasks)

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._accept(sock)) for sock in self.sockets]

    def close(self) -> None:
        """Stop accepting. A socket an accept loop waits on is closed by that loop as it ends (not
        under it); the others at once."""
        self._closed = True
        for task in (*self._tasks, *self._handshakes):
            task.cancel()
        if not self._tasks:
            for sock in self.sockets:
                sock.close()

    async def _accept(self, sock: socket.socket) -> None:
        try:
            await self._accept_loop(sock)
        finally:
            sock.close()

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        name = self.listener.name
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("listener %s cannot accept connections: %s; trying again in %.0f s", name,
                              _reason(e), _ACCEPT_RETRY_S)
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            try:
                await self.limits.wait_for_slot(name)
            except asyncio.CancelledError:
                conn.close()
                raise
            slot = self.limits.admit(name, str(peer[0]))
            if slot is None:
                conn.close()
                continue
            if self.ssl_context is None:
                await self._serve(conn, slot)
            else:  # the handshake takes round trips: it must not hold up the next accept
                task = asyncio.ensure_future(self._serve(conn, slot))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    async def _serve(self, conn: socket.socket, slot: ConnectionSlot) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(lambda: self.protocol(slot), conn, ssl=self.ssl_context,
                                               ssl_handshake_timeout=self.handshake_timeout)
        except BaseException as e:
            slot.release()
            conn.close()
            if isinstance(e, asyncio.CancelledError):
                raise
            if not isinstance(e, (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError)):
                log.warning("listener %s: a connection could not be set up: %r", self.listener.name, e)
