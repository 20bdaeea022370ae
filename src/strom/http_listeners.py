"""Binding the sockets of a part's HTTP listeners (the admin listener, the schema registry) all at
once: either every listener is bound, or none stays open and the bind error (the broker's one line
naming the listener) goes up, so a failed start leaves nothing half served."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class HttpListener(Protocol):
    """One listener (strom.config.broker.Listener): HTTP or HTTPS, host, port."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


L = TypeVar("L", bound=HttpListener)
Bind = Callable[[str, str, int], list[socket.socket]]  # (what, host, port) -> the bound sockets


def bind_all(listeners: Sequence[L], bind: Bind, what: str) -> list[tuple[L, list[socket.socket]]]:
    """Each listener with its bound sockets (``what`` names the part in errors: "admin listener")."""
    bound: list[tuple[L, list[socket.socket]]] = []
    try:
        for listener in listeners:
            name = f"{what} {listener.name.lower()}://{listener.host}:{listener.port}"
            bound.append((listener, bind(name, listener.host or "0.0.0.0", listener.port)))
    except Exception:
        for _, sockets in bound:
            for sock in sockets:
                sock.close()
        raise
    return bound
