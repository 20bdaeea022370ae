"""Which host names the admin listener answers for: the guard against DNS rebinding.

A web page cannot send requests to the admin listener from its own origin, but its site can point
its own name at the listener's address (DNS rebinding): the browser then treats the listener as
that site and lets the page read and change anything, with the page's name in the Host header.
So every request must name in its Host header one of the listener's own names:
- an IP address, any (a page served from an address is served by whatever listens there: an
  address cannot be rebound);
- ``localhost``; the machine's host name when the listener binds every interface; the names in
  ``admin.listeners`` and the hosts of ``advertised.listeners`` (how clients know this broker);
- ``admin.allowed.hosts``: names, ``.example.com`` for a domain and its subdomains, or ``*`` for any.
Anything else is answered 421 Misdirected Request. A request without a Host header is let through:
every browser sends one.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from strom.config import BrokerConfig
from strom.config.broker import Listener

log = logging.getLogger("strom.admin")

_WILDCARDS = ("", "0.0.0.0", "::")
_LOGGED_MAX = 64  # distinct refused names logged (one line each), so a flood does not fill the log


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str | None:
    """The name in a Host header, lower case, without the port, brackets or a trailing dot."""
    try:
        name = urlsplit("//" + header.strip()).hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


class AllowedHosts:
    """``listeners``: the HTTP listeners guarded (admin.listeners unless given; the schema
    registry's are guarded the same way); ``what`` names them in the log and the refusal."""

    def __init__(self, config: BrokerConfig, listeners: Sequence[Listener] | None = None,
                 what: str = "admin listener") -> None:
        names = {"localhost"}
        self.what = what
        for listener in config.admin_listeners if listeners is None else listeners:
            host = listener.host.lower().rstrip(".")
            if host in _WILDCARDS:
                names.add(socket.gethostname().lower())
            elif not _is_address(host):
                names.add(host)
        names.update(a.host.lower().rstrip(".") for a in config.advertised_listeners if not _is_address(a.host))
        self.names = frozenset(names)
        self.allowed = tuple(config.admin_allowed_hosts)
        self._logged: set[str] = set()

    def allows(self, name: str) -> bool:
        if name in self.names or _is_address(name):
            return True
        for allowed in self.allowed:
            if allowed == "*" or name == allowed or (allowed.startswith(".") and
                                                     (name == allowed[1:] or name.endswith(allowed))):
                return True
        return False

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        @web.middleware
        async def check_host(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
            header = request.headers.get(hdrs.HOST)
            if header is not None:
                name = host_name(header)
                if name is None or not self.allows(name):
                    shown = name if name is not None else header[:100]
                    if len(self._logged) < _LOGGED_MAX and shown not in self._logged:
                        self._logged.add(shown)
                        log.warning("%s: refused a request for host %r from %s (not one of its names; "
                                    "admin.allowed.hosts adds names)", self.what, shown, request.remote)
                    return web.json_response(
                        {"error": f"this {self.what} does not answer for host {shown!r}; "
                                  "add the name to admin.allowed.hosts to use it"}, status=421)
            return await handler(request)

        return check_host
