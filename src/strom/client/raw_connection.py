"""A blocking Kafka connection: encode a request with kio, send it, read its response. The CLI uses
it for the requests the AdminClient lacks (DescribeLogDirs, AlterPartitionReassignments, the quota
APIs), the Spark source's direct reader for Metadata, ListOffsets and Fetch. On a secured listener
it speaks TLS and logs in with SASL first, from the client properties."""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.security.client import ClientSecurity


MAX_RESPONSE = 64 * 1024 * 1024  # a response larger than this is refused (the connection is closed)


class RawConnection:
    """Just enough of the Kafka protocol for one request at a time (no pipelining)."""

    def __init__(self, host: str, port: int, timeout: float, security: ClientSecurity | None = None,
                 client_id: str = "strom-cli", max_response: int = MAX_RESPONSE) -> None:
        self.client_id = client_id
        self.max_response = max_response
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
        self.sock.sendall(wire.encode_request(api_key, version, self.correlation, self.client_id, body))
        size = struct.unpack(">i", self._read(4))[0]
        if not 0 <= size <= self.max_response:
            self.close()  # the rest of the frame is still in the socket: the connection is unusable
            raise OSError(f"bad response size {size}")
        got, response = wire.decode_response(api_key, version, self._read(size))
        if got != self.correlation:
            self.close()
            raise OSError("correlation id mismatch")
        return response

    def _read(self, n: int) -> memoryview:
        """Exactly n bytes, received straight into one buffer (no chunk concatenation), read-only
        (kio's decoder takes nothing else)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise OSError("connection closed")
            got += k
        return view.toreadonly()
