"""A blocking Kafka connection for the one-off requests the AdminClient lacks (DescribeLogDirs,
AlterPartitionReassignments, the quota APIs): encode with kio, send, read one response. On a
secured listener it speaks TLS and logs in with SASL first, from the -X client properties."""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.security.client import ClientSecurity


class RawConnection:
    """Just enough of the Kafka protocol for one request the AdminClient lacks (DescribeLogDirs)."""

    def __init__(self, host: str, port: int, timeout: float, security: ClientSecurity | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        if security is not None and security.ssl_context is not None:
            try:
                sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
            except Exception:
                sock.close()
                raise
        self.sock = sock
        self.sock.settimeout(timeout)
        self.correlation = 0
        if security is not None and security.mechanism is not None:
            try:
                self._login(security)
            except Exception:
                self.close()
                raise

    def _login(self, security: ClientSecurity) -> None:
        from strom.protocol import wire
        from strom.security.sasl_client import SaslClient

        assert security.mechanism is not None and security.username is not None and security.password is not None
        handshake = self.request(17, 1, wire.request_class(17, 1)(mechanism=security.mechanism))
        if handshake.error_code:
            raise OSError(f"SASL mechanism {security.mechanism} refused; the broker offers {list(handshake.mechanisms)}")
        client = SaslClient(security.mechanism, security.username, security.password)
        token: bytes | None = client.first()
        while token is not None:
            resp = self.request(36, 1, wire.request_class(36, 1)(auth_bytes=token))
            if resp.error_code:
                raise OSError(f"SASL authentication failed: {resp.error_message}")
            token = client.step(bytes(resp.auth_bytes))

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
