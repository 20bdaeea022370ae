"""Who may use the admin HTTP listener when the broker authenticates Kafka clients.

With a SASL listener configured, the console and the REST API ask for a login (HTTP Basic; serve
them over https so the password is not sent in the clear) checked against the broker's own SASL
users: the PLAIN users of its JAAS configuration and the SCRAM credentials it stores. The request
then acts as that user: with an authorizer, each API call needs the ACL Kafka's matching request
would need, and a refusal leaves an audit line, as for Kafka requests. /healthz and /readyz stay
open (supervisors probe them); /metrics needs the login too (it names every topic and group).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from typing import TYPE_CHECKING

from aiohttp import web

from strom.broker.context import RequestContext
from strom.security.scram import MECHANISMS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from strom.broker.server import Broker

audit = logging.getLogger("strom.audit")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PRINCIPAL_KEY = "strom.principal"
REALM = 'Basic realm="strom", charset="UTF-8"'
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_CACHE_S = 300.0  # a checked login is not derived again (PBKDF2) for this long


class AdminLogin:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        listeners = [s for s in broker.security.values() if s.uses_sasl]
        self.required = bool(listeners)
        self.plain_users: dict[str, str] = {}
        for s in listeners:
            if "PLAIN" in s.mechanisms:
                self.plain_users.update(s.plain_users)
        self._checked: dict[tuple[str, bytes], float] = {}

    def check(self, user: str, password: str) -> bool:
        key = (user, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        if self._checked.get(key, 0.0) > now:
            return True
        ok = self._plain(user, password) or self._scram(user, password)
        if ok:
            self._checked[key] = now + _CACHE_S
        return ok

    def _plain(self, user: str, password: str) -> bool:
        expected = self.plain_users.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    def _scram(self, user: str, password: str) -> bool:
        for mechanism in MECHANISMS:
            cred = self.broker.scram_credential(user, mechanism)
            if cred is None:
                continue
            name = _HASHES[mechanism]
            salted = hashlib.pbkdf2_hmac(name, password.encode(), cred.salt, cred.iterations)
            client_key = hmac.digest(salted, b"Client Key", name)
            if hmac.compare_digest(hashlib.new(name, client_key).digest(), cred.stored_key):
                return True
        return False


def _credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


def middleware(login: AdminLogin) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def require_login(request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if not login.required or request.path in OPEN_PATHS:
            return await handler(request)
        given = _credentials(request)
        if given is None or not login.check(*given):
            if given is not None:
                audit.info("DENIED admin login as User:%s from %s: %s %s", given[0], request.remote,
                           request.method, request.path)
            return web.json_response({"error": "login required"}, status=401, headers={"WWW-Authenticate": REALM})
        request[PRINCIPAL_KEY] = f"User:{given[0]}"
        return await handler(request)

    return require_login


def context(request: web.Request, what: str) -> RequestContext:
    """The request as the authorizer sees it: its principal (User:ANONYMOUS without a login) and
    address; the audit line names ``what`` in place of a Kafka API."""
    return RequestContext(-1, 0, 0, f"admin http: {what}", request.remote or "", 0,
                          principal=str(request.get(PRINCIPAL_KEY, "User:ANONYMOUS")))
