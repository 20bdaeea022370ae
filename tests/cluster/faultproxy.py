"""FaultProxy: a fault-injecting TCP proxy on 127.0.0.1 for cluster tests.

It listens on a port of its own and forwards every connection to a target port. A test switches it
between:
- pass: bytes flow both ways;
- cut, "reset": open connections are torn down with a TCP reset and new ones are reset on arrival
  (a host that is down, a firewall that rejects);
- cut, "blackhole": open connections stay open but every byte is silently dropped, and new
  connections are accepted and then hang (a network partition: the peers learn nothing until their
  own timeouts fire; a close on one side is not passed on either);
and heal, back to pass. Connections that hung are reset when the cut heals: bytes were dropped
from their streams, so they are unusable (their peers would have timed them out).

A cut may be limited to the connections opened by given processes (``from_pids``; the connecting
socket is looked up in /proc), so that one proxy in front of a broker can cut off one peer while
the others still get through.

The proxy runs its own asyncio loop in a daemon thread. It stops on ``stop()``, at the end of a
``with`` block, or by itself after ``lifetime_s``, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from collections.abc import Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

Mode = Literal["reset", "blackhole"]
T = TypeVar("T")
_CHUNK = 65536
_CONNECT_TIMEOUT_S = 5.0
_CONTROL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class _Cut:
    mode: Mode
    pids: frozenset[int] | None  # None: every connection


@dataclass(eq=False)
class _Link:
    """One accepted connection and, unless it was cut on arrival, its upstream twin."""

    client: asyncio.StreamWriter
    peer_port: int
    upstream: asyncio.StreamWriter | None = None
    blackholed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    def __init__(self, target_port: int, name: str = "", lifetime_s: float = 900.0,
                 target_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.name = name or f"proxy->{target_port}"
        self.lifetime_s = lifetime_s
        self.port = listen_port  # the OS's choice once started, when 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[Any]] = set()  # one per accepted connection
        self._cut: _Cut | None = None
        # Counters for tests and failure messages (written on the proxy's thread only).
        self.accepted = 0
        self.resets = 0
        self.forwarded_bytes = 0
        self.dropped_bytes = 0

    def __repr__(self) -> str:
        return f"FaultProxy({self.name} :{self.port} -> :{self.target_port}, {self.state})"

    # ---- life (any thread) -----------------------------------------------------------------

    def start(self) -> FaultProxy:
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            try:
                loop.run_until_complete(self._main(ready))
            except BaseException as e:  # a bind error: start() re-raises it in the test's thread
                failure.append(e)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"faultproxy-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(_CONTROL_TIMEOUT_S) or failure:
            raise RuntimeError(f"{self.name}: proxy did not start: {failure[:1]}")
        return self

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile (lifetime)
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(_CONTROL_TIMEOUT_S)

    def __enter__(self) -> FaultProxy:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def state(self) -> str:
        cut = self._cut
        if cut is None:
            return "pass"
        return cut.mode if cut.pids is None else f"{cut.mode} from pids {sorted(cut.pids)}"

    @property
    def connections(self) -> int:
        return len(self._links)

    # ---- control (any thread) --------------------------------------------------------------

    def cut(self, mode: Mode = "blackhole", from_pids: Collection[int] | None = None) -> None:
        """Cut every connection, or only those opened by ``from_pids``, now and until heal()."""
        if mode not in ("reset", "blackhole"):
            raise ValueError(f"unknown cut mode {mode!r}")
        self._control(self._apply_cut(_Cut(mode, frozenset(from_pids) if from_pids is not None else None)))

    def heal(self) -> None:
        """Back to pass: new connections get through; the ones that hung are reset."""
        self._control(self._heal())

    def _control(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or not self.running:
            coro.close()
            raise RuntimeError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CONTROL_TIMEOUT_S)

    # ---- the loop ------------------------------------------------------------------------------

    async def _main(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self.lifetime_s)
        server.close()
        tasks = [t for link in self._links for t in link.tasks] + list(self._handlers)
        for link in list(self._links):
            self._reset(link)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _apply_cut(self, cut: _Cut) -> None:
        self._cut = cut
        for link in self._matching(cut, list(self._links)):
            self._cut_link(link, cut.mode)

    async def _heal(self) -> None:
        self._cut = None
        for link in [link for link in self._links if link.blackholed]:
            self._reset(link)

    def _cut_link(self, link: _Link, mode: Mode) -> None:
        if mode == "reset":
            self._reset(link)
        else:
            link.blackholed = True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._handlers.add(me)
            me.add_done_callback(self._handlers.discard)
        self.accepted += 1
        link = _Link(writer, int(writer.get_extra_info("peername")[1]))
        self._links.add(link)
        cut = self._cut
        if cut is not None and self._matching(cut, [link]):
            self._cut_link(link, cut.mode)
            if cut.mode == "blackhole":
                await self._pump(reader, None, link)  # swallows what the client sends
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(self.target_host, self.target_port), _CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            self._reset(link)  # nothing listens there: the client's connection fails as it would
            return
        link.upstream = up_writer
        if link not in self._links:  # reset by a cut while we were connecting
            self._reset(link)
            return
        link.tasks = [asyncio.ensure_future(self._pump(reader, up_writer, link)),
                      asyncio.ensure_future(self._pump(up_reader, writer, link))]
        await asyncio.gather(*link.tasks, return_exceptions=True)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None, link: _Link) -> None:
        """Copy one direction until EOF; while the link is blackholed, read and drop."""
        try:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    break
                if link.blackholed or dst is None:
                    self.dropped_bytes += len(data)
                    continue
                dst.write(data)
                await dst.drain()
                self.forwarded_bytes += len(data)
        except (OSError, ConnectionError):
            pass  # reset by either end, or by us
        if link.blackholed:
            return  # a partition carries no FIN either: the other side hangs until heal() resets it
        self._close(link)

    def _matching(self, cut: _Cut, links: list[_Link]) -> list[_Link]:
        if cut.pids is None:
            return links
        owned = _socket_inodes_of(cut.pids)
        by_port = _connecting_sockets(self.port)
        return [link for link in links if by_port.get(link.peer_port) in owned]

    def _close(self, link: _Link) -> None:
        self._links.discard(link)
        for w in (link.client, link.upstream):
            if w is not None:
                w.close()

    def _reset(self, link: _Link) -> None:
        """Close both ends with a TCP reset (SO_LINGER 0), as a rejecting host would."""
        self._links.discard(link)
        self.resets += 1
        for w in (link.client, link.upstream):
            if w is None or w.transport.is_closing():
                continue
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()


# ---- which process opened a connection (Linux /proc) -----------------------------------------------

def _socket_inodes_of(pids: Collection[int]) -> set[int]:
    """The inodes of every socket the processes hold open."""
    out: set[int] = set()
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to look at
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def _connecting_sockets(remote_port: int) -> dict[int, int]:
    """local port -> socket inode, for the TCP sockets whose remote end is ``remote_port`` (the
    connecting ends of the connections to a proxy listening there)."""
    out: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            rem_port = int(fields[2].rsplit(":", 1)[1], 16)
            if rem_port == remote_port:
                out[local_port] = int(fields[9])
    return out
