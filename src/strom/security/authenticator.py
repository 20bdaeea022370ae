"""One connection's authentication on a SASL listener (Kafka's SaslServerAuthenticator), sans-IO.

States: waiting for SaslHandshake -> exchanging tokens (SaslAuthenticate, or raw tokens after a
v0 handshake) -> authenticated; any failure -> failed (the connection answers, then closes).
Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate may be sent. With
``connections.max.reauth.ms`` the session expires; a new SaslHandshake on the same connection
re-authenticates (KIP-368) and must name the same principal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from strom.security.listener import ListenerSecurity
from strom.security.principal import KafkaPrincipal, user
from strom.security.sasl_server import AuthenticationFailed, CredentialLookup, SaslServer, make_server

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
_PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
# Kafka's error codes for the answers below.
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58


@dataclass(frozen=True, slots=True)
class AuthResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int


class SaslAuthenticator:
    def __init__(self, listener: ListenerSecurity, lookup: CredentialLookup,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.listener = listener
        self._lookup = lookup
        self._clock_ns = clock_ns
        self._server: SaslServer | None = None
        self.raw_tokens = False  # after a v0 handshake: tokens come as bare size-prefixed frames
        self.principal: KafkaPrincipal | None = None  # set once authenticated
        self.expires_at_ns: int | None = None
        self.failed = False  # the connection must close once the current answer is written
        self._mechanism: str | None = None  # the first successful handshake's: re-authentication keeps it
        self._bad_mechanism: str | None = None  # why a re-authentication's mechanism is refused

    def allows(self, api_key: int) -> bool:
        """May this request be served now? False: close the connection without serving it."""
        if self.failed:
            return False
        if api_key in _PRE_AUTH_APIS:
            return True
        if self.principal is None:
            return False
        return self.expires_at_ns is None or self._clock_ns() < self.expires_at_ns

    @property
    def max_receive(self) -> int:
        """Largest frame accepted now: small until the client has authenticated."""
        return self.listener.max_receive if self.principal is None else 0

    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """SaslHandshake: (error code, the listener's mechanisms)."""
        enabled = list(self.listener.mechanisms)
        if self._server is not None and not self._server.complete:
            self.failed = True
            return ILLEGAL_SASL_STATE, enabled
        if mechanism not in enabled:
            self.failed = True  # as Kafka: the answer lists what is offered, then the connection closes
            return UNSUPPORTED_SASL_MECHANISM, enabled
        if self.principal is not None and mechanism != self._mechanism:
            # Re-authentication may not switch mechanisms (KIP-368): as Kafka, the handshake is
            # answered and the next token refused (SASL_AUTHENTICATION_FAILED), then the close.
            self._bad_mechanism = (f"SASL mechanism {mechanism!r} requested for re-authentication is not "
                                   f"{self._mechanism!r}, the one this connection authenticated with")
        self._server = make_server(mechanism, self.listener.plain_users, self._lookup)
        self._mechanism = self._mechanism or mechanism
        self.raw_tokens = version == 0
        return 0, enabled

    def authenticate(self, token: bytes) -> AuthResult:
        server = self._server
        if server is None or server.complete:
            self.failed = True
            return AuthResult(ILLEGAL_SASL_STATE, "SaslAuthenticate was not expected now (send SaslHandshake first)",
                              b"", 0)
        if self._bad_mechanism is not None:
            self.failed = True
            return AuthResult(SASL_AUTHENTICATION_FAILED, self._bad_mechanism, b"", 0)
        try:
            out = server.evaluate(token)
        except AuthenticationFailed as e:
            self.failed = True
            return AuthResult(SASL_AUTHENTICATION_FAILED, str(e), b"", 0)
        if not server.complete:
            return AuthResult(0, None, out, 0)
        principal = user(server.username or "")
        if self.principal is not None and principal != self.principal:
            self.failed = True  # re-authentication may not switch identities (KIP-368)
            return AuthResult(SASL_AUTHENTICATION_FAILED, "Re-authentication must use the same principal", b"", 0)
        self.principal = principal
        self.raw_tokens = False
        lifetime = self.listener.reauth_ms
        self.expires_at_ns = self._clock_ns() + lifetime * 1_000_000 if lifetime > 0 else None
        return AuthResult(0, None, out, lifetime)
