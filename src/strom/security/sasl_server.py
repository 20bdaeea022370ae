"""The broker's side of each SASL mechanism: tokens in, tokens out (sans-IO).

PLAIN checks the JAAS users of the listener (Kafka's PlainServerCallbackHandler); SCRAM-SHA-256/512
run scramp's server against the stored credentials. Every failure raises AuthenticationFailed with
one message that does not say which part (user, password, nonce, proof) was wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Protocol

import scramp

from strom.security.scram import DEFAULT_ITERATIONS, SALT_BYTES, ScramCredential

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
# A client-first message, a user name, a PLAIN token: none is near this long.
MAX_TOKEN = 16 * 1024


class AuthenticationFailed(Exception):
    pass


def failure(mechanism: str) -> AuthenticationFailed:
    # Kafka's own wording for a bad user or password: the same for both, on purpose.
    return AuthenticationFailed(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    username: str | None  # set once complete

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """RFC 4616: one token, ``authzid NUL authcid NUL password``."""

    def __init__(self, users: dict[str, str]) -> None:
        self.mechanism = PLAIN
        self.users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete or len(token) > MAX_TOKEN:
            raise failure(PLAIN)
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise failure(PLAIN)
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise failure(PLAIN) from None
        expected = self.users.get(user)
        # Compared even for an unknown user, so the time taken does not tell whether the user exists.
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode()) and expected is not None
        if not ok or not user or (authzid and authzid != user):
            raise failure(PLAIN)
        self.complete, self.username = True, user
        return b""


CredentialLookup = Callable[[str, str], ScramCredential | None]
# Per process: makes the made-up salt of an unknown user stable, so asking twice shows nothing.
_DECOY_SECRET = os.urandom(32)


def decoy_salt(mechanism: str, user: str, secret: bytes = _DECOY_SECRET) -> bytes:
    """The salt an unknown user is shown: SALT_BYTES derived with HMAC-SHA256 under ``secret`` from
    the mechanism and the name (a block counter extends it past one digest), so it is the same on
    every try, differs between mechanisms as a real user's do, and is as long as a real one."""
    seed = mechanism.encode() + b"\0" + user.encode()
    blocks = (SALT_BYTES + hashlib.sha256().digest_size - 1) // hashlib.sha256().digest_size
    return b"".join(hmac.digest(secret, seed + bytes([i]), hashlib.sha256) for i in range(1, blocks + 1))[:SALT_BYTES]


class ScramServer:
    """RFC 5802 through scramp: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self._user: str | None = None
        self._known = False
        self.complete = False
        self.username: str | None = None

    def _auth_info(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        user = name.replace("=2C", ",").replace("=3D", "=")
        self._user = user
        credential = self._lookup(user, self.mechanism)
        self._known = credential is not None
        if credential is None:
            # An unknown user gets a plausible exchange that fails at the proof, as a wrong password
            # does: a salt and iteration count shaped as the tools make them, the same salt on every
            # try, so the answer does not tell which users exist.
            keys = os.urandom(64)
            credential = ScramCredential(decoy_salt(self.mechanism, user), keys[:32], keys[32:], DEFAULT_ITERATIONS)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        if len(token) > MAX_TOKEN:
            raise failure(self.mechanism)
        try:
            text = token.decode("utf-8")
            if self._step == 0:
                self._server.set_client_first(text)
                self._step = 1
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(text)
                if not self._known:
                    raise failure(self.mechanism)
                final = self._server.get_server_final().encode()
                self.complete, self.username = True, self._user
                return final
        except (scramp.ScramException, UnicodeDecodeError, ValueError, KeyError, IndexError):
            raise failure(self.mechanism) from None
        raise failure(self.mechanism)  # a token after the exchange ended


def make_server(mechanism: str, plain_users: dict[str, str], lookup: CredentialLookup) -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(plain_users)
    return ScramServer(mechanism, lookup)
