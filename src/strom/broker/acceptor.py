"""The Kafka listeners' sockets (Kafka's Acceptor): bound before the logs load, so that an address
already in use stops the broker with one line before it touches its data; accepting once the broker
serves (connections that come earlier wait in the kernel's listen queue).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.connection import KafkaConnection
    from strom.config.broker import Listener

log = logging.getLogger("strom.connection")

# The kernel's file table is full: asyncio's servers wait this long before accepting again.
_ACCEPT_RETRY_S = 1.0


class ListenerBindError(Exception):
    """A listener's address cannot be bound; str() is the one line the broker stops with."""


def bind(what: str, host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address ``host`` resolves to (one for an address),
    as asyncio's create_server binds them; ListenerBindError names ``what`` and the port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise ListenerBindError(f"{what} cannot listen on port {port}: host {host} does not resolve "
                                f"({_reason(e)})") from None
    sockets: list[socket.socket] = []
    seen = set()
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
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
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


class Acceptor:
    """Accepts one listener's connections on its sockets and hands them to KafkaConnection."""

    def __init__(self, listener: Listener, sockets: list[socket.socket], protocol: Callable[[], KafkaConnection],
                 ssl_context: ssl.SSLContext | None, handshake_timeout: float | None) -> None:
        self.listener = listener
        self.sockets = sockets
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    @property
    def serving(self) -> bool:
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._accept(sock)) for sock in self.sockets]

    def close(self) -> None:
        for task in (*self._tasks, *self._handshakes):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("listener %s cannot accept connections: %s; trying again in %.0f s", self.listener.name,
                              _reason(e), _ACCEPT_RETRY_S)
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            if self.ssl_context is None:
                await self._serve(conn)
            else:  # the handshake takes round trips: it must not hold up the next accept
                task = asyncio.ensure_future(self._serve(conn))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(self.protocol, conn, ssl=self.ssl_context,
                                               ssl_handshake_timeout=self.handshake_timeout)
        except BaseException as e:
            conn.close()
            if isinstance(e, asyncio.CancelledError):
                raise
            if not isinstance(e, (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError)):
                log.warning("listener %s: a connection could not be set up: %r", self.listener.name, e)
