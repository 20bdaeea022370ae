"""BrokerConnection: one broker talking to another over the Kafka protocol (follower fetches,
OffsetForLeaderEpoch), asyncio streams, one request in flight at a time, every wait bounded.
On a secured inter-broker listener it speaks TLS and logs in with SASL first (strom.security.client)."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from typing import Any

from strom.protocol import wire
from strom.security.client import PLAINTEXT_CLIENT, ClientSecurity
from strom.security.sasl_client import SaslClient

_SIZE = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float,
                 security: ClientSecurity = PLAINTEXT_CLIENT) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)
        self._renew_at: float | None = None  # log in again (new connection) before the session ends

    async def connect(self) -> None:
        ctx = self.security.ssl_context
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
        # arrives as the awaited call completes, and a task being stopped then runs on.
        async with asyncio.timeout(self.timeout_s):
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=ctx, server_hostname=self.host if ctx else None)
        if self.security.mechanism is not None:
            await self._login()

    async def _login(self) -> None:
        sec = self.security
        assert sec.mechanism is not None and sec.username is not None and sec.password is not None
        hs_cls = wire.request_class(17, 1)
        handshake = await self.request(17, 1, hs_cls(mechanism=sec.mechanism))
        if handshake.error_code != 0:
            raise ConnectionError(f"SASL handshake with {self.host}:{self.port} refused ({handshake.error_code}); "
                                  f"it offers {list(handshake.mechanisms)}")
        client = SaslClient(sec.mechanism, sec.username, sec.password)
        token: bytes | None = client.first()
        auth_cls = wire.request_class(36, 1)
        lifetime_ms = 0.0
        while token is not None:
            resp = await self.request(36, 1, auth_cls(auth_bytes=token))
            if resp.error_code != 0:
                raise ConnectionError(f"SASL login to {self.host}:{self.port} as {sec.username} failed: "
                                      f"{resp.error_message}")
            token = client.step(bytes(resp.auth_bytes))
            lifetime_ms = resp.session_lifetime.total_seconds() * 1000
        # With connections.max.reauth.ms the other broker closes an expired session; start a new
        # one before that (at 90% of the lifetime) instead of failing a fetch.
        self._renew_at = time.monotonic() + lifetime_ms * 0.9 / 1000 if lifetime_ms > 0 else None

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float | None = None) -> Any:
        """Send one request and read its response body (a kio entity)."""
        if self._renew_at is not None and time.monotonic() >= self._renew_at:
            self.close()
        if self._writer is None or self._reader is None:
            await self.connect()
        assert self._writer is not None and self._reader is not None
        correlation = next(self._correlation) & 0x7FFFFFFF
        self._writer.write(wire.encode_request(api_key, version, correlation, self.client_id, body))
        await self._writer.drain()
        reader = self._reader

        async def read() -> bytes:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            return await reader.readexactly(size)

        async with asyncio.timeout(timeout_s or self.timeout_s):
            frame = await read()
        got, response = wire.decode_response(api_key, version, frame)
        if got != correlation:
            raise ConnectionError(f"correlation id {got} for request {correlation}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._renew_at = None
