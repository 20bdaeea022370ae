"""A blocking Kafka connection for the one-off requests the AdminClient lacks (DescribeLogDirs,
AlterPartitionReassignments): encode with kio, send, read one response."""

from __future__ import annotations

import socket
import struct
from typing import Any


class RawConnection:
    """Just enough of the Kafka protocol for one request the AdminClient lacks (DescribeLogDirs)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, api_key: int, version: int, body: Any) -> Any:
        from strom.protocol import wire

        self.correlation += 1
        self.sock.sendall(wire.encode_request(api_key, version, self.correlation, "strom-cli", body))
        size = struct.unpack(">i", self._read(4))[0]
        if not 0 <= size <= 64 * 1024 * 1024:
            raise OSError(f"bad response size {size}")
        got, response = wire.decode_response(api_key, version, self._read(size))
        if got != self.correlation:
            raise OSError("correlation id mismatch")
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        return bytes(buf)
