"""Who may use the admin HTTP listener when the broker authenticates Kafka clients.

With a SASL listener configured, the console and the REST API ask for a login (HTTP Basic; serve
them over https so the password is not sent in the clear) checked against the broker's own SASL
users: the PLAIN users of its JAAS configuration and the SCRAM credentials it stores. The request
then acts as that user: with an authorizer, each API call needs the ACL Kafka's matching request
would need, and a refusal leaves an audit line, as for Kafka requests. /healthz and /readyz stay
open (supervisors probe them); /metrics needs the login too (it names every topic and group).

A password is checked with PBKDF2 (the SCRAM derivation) in a small thread pool of its own, never on
the event loop, and costs the same whether the user exists or not: a name with no SCRAM credential
is derived against a made-up salt with the default iterations. A good login is remembered for a
while, as the credential it matched: a changed password or a deleted user ends it at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from aiohttp import web

from strom.broker.context import RequestContext
from strom.security.acl import client_address
from strom.security.sasl_server import decoy_salt
from strom.security.scram import DEFAULT_ITERATIONS, MECHANISMS, ScramCredential

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from strom.broker.server import Broker

audit = logging.getLogger("strom.audit")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PRINCIPAL_KEY = "strom.principal"
REALM = 'Basic realm="strom", charset="UTF-8"'
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_CACHE_S = 300.0  # a checked login is not derived again (PBKDF2) for this long
_CHECK_THREADS = 2  # logins derived at once; more wait their turn, off the event loop
# What a good login matched: ("PLAIN", b"") or (SCRAM mechanism, its stored key).
Match = tuple[str, bytes]


class AdminLogin:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        listeners = [s for s in broker.security.values() if s.uses_sasl]
        self.required = bool(listeners)
        self.plain_users: dict[str, str] = {}
        for s in listeners:
            if "PLAIN" in s.mechanisms:
                self.plain_users.update(s.plain_users)
        self._checked: dict[tuple[str, bytes], tuple[float, Match]] = {}
        self._threads: ThreadPoolExecutor | None = None

    async def check(self, user: str, password: str) -> bool:
        key = (user, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        remembered = self._checked.get(key)
        if remembered is not None:
            until, matched = remembered
            if until > now and self._still_valid(user, matched):
                return True
            del self._checked[key]  # expired, or the credentials changed since
        # The credentials are read here, on the loop; only the derivation runs in a thread.
        credentials = {m: self.broker.scram_credential(user, m) for m in MECHANISMS}
        if self._threads is None:
            self._threads = ThreadPoolExecutor(_CHECK_THREADS, thread_name_prefix="strom-admin-login")
        found = await asyncio.get_running_loop().run_in_executor(
            self._threads, verify, user, password, self.plain_users.get(user), credentials)
        if found is None:
            return False
        self._checked[key] = (now + _CACHE_S, found)
        return True

    def _still_valid(self, user: str, matched: Match) -> bool:
        """The credential a remembered login matched is still the user's (PLAIN users are fixed
        until a restart; a SCRAM user may have been deleted or given a new password since)."""
        mechanism, stored_key = matched
        if mechanism == "PLAIN":
            return user in self.plain_users
        cred = self.broker.scram_credential(user, mechanism)
        return cred is not None and hmac.compare_digest(cred.stored_key, stored_key)

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None


def verify(user: str, password: str, plain: str | None,
           credentials: dict[str, ScramCredential | None]) -> Match | None:
    """What ``password`` matches among the user's PLAIN password and SCRAM credentials, or None.

    Every check is made whatever the outcome, so the time taken does not tell whether the user
    exists: one PBKDF2 derivation per SCRAM mechanism, with the user's salt and iterations, or with a
    made-up salt and the default iterations when the user has no credential for it."""
    secret = password.encode()
    matched: Match | None = None
    if hmac.compare_digest((plain or "\0").encode(), secret) and plain is not None:
        matched = ("PLAIN", b"")
    for mechanism in MECHANISMS:
        cred = credentials.get(mechanism)
        name = _HASHES[mechanism]
        salt, iterations = (cred.salt, cred.iterations) if cred is not None else \
            (decoy_salt(mechanism, user), DEFAULT_ITERATIONS)
        salted = hashlib.pbkdf2_hmac(name, secret, salt, iterations)
        stored_key = hashlib.new(name, hmac.digest(salted, b"Client Key", name)).digest()
        expected = cred.stored_key if cred is not None else bytes(len(stored_key))
        if hmac.compare_digest(stored_key, expected) and cred is not None and matched is None:
            matched = (mechanism, cred.stored_key)
    return matched


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
        if given is None or not await login.check(*given):
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
    return RequestContext(-1, 0, 0, f"admin http: {what}", client_address(request.remote or ""), 0,
                          principal=str(request.get(PRINCIPAL_KEY, "User:ANONYMOUS")))
