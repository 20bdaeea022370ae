"""BrokerConnection: one broker talking to another over the Kafka protocol (follower fetches,
OffsetForLeaderEpoch), asyncio streams, one request in flight at a time, every wait bounded."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from strom.protocol import wire

_SIZE = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)

    async def connect(self) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
        # arrives as the awaited call completes, and a task being stopped then runs on.
        async with asyncio.timeout(self.timeout_s):
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float | None = None) -> Any:
        """Send one request and read its response body (a kio entity)."""
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
