"""SASL over a RawConnection, step by step, so tests can see every answer (and break the exchange)."""

from __future__ import annotations

from typing import Any

import scramp
from helpers import RawConnection, request_class


def handshake(conn: RawConnection, mechanism: str, version: int = 1) -> Any:
    return conn.request(17, version, request_class("sasl_handshake", version, "SaslHandshakeRequest")(
        mechanism=mechanism))


def authenticate(conn: RawConnection, token: bytes, version: int = 2) -> Any:
    return conn.request(36, version, request_class("sasl_authenticate", version, "SaslAuthenticateRequest")(
        auth_bytes=token))


def plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def login(conn: RawConnection, mechanism: str, user: str, password: str, version: int = 2) -> Any:
    """Handshake v1 and the whole exchange; the last SaslAuthenticate response."""
    assert handshake(conn, mechanism).error_code == 0
    if mechanism == "PLAIN":
        return authenticate(conn, plain_token(user, password), version)
    client = scramp.ScramClient([mechanism], user, password)
    first = authenticate(conn, client.get_client_first().encode(), version)
    if first.error_code:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = authenticate(conn, client.get_client_final().encode(), version)
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())  # the broker proved it knows the key
    return final
