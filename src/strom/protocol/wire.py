"""Kafka request/response framing and headers, sans-IO.

A request frame is a 4-byte big-endian size followed by the header and body. Request header v1 is
api key, api version, correlation id and a classic int16 client id; v2 (flexible APIs) adds tagged
fields. Response header v0 is the correlation id; v1 adds tagged fields, except ApiVersions whose
response header is always v0 so clients can read it before they know our versions.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strom.protocol.guard import entity_skimmer

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_PREFIX = struct.Struct(">hhi")


class FrameTooLarge(Exception):
    pass


class BadRequest(Exception):
    """The request cannot be decoded; the connection is closed."""


class FrameDecoder:
    """Accumulates bytes from the socket and yields whole frames (without the size prefix)."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame}")
            if len(buf) - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    api_key: int
    api_version: int
    correlation_id: int


def read_prefix(frame: bytes) -> RequestPrefix:
    if len(frame) < 8:
        raise BadRequest("request shorter than its header")
    return RequestPrefix(*_PREFIX.unpack_from(frame, 0))


@cache
def _request_readers(api_key: int, api_version: int) -> tuple[Any, Any, Any]:
    cls = load_request_schema(api_key, api_version)
    header_cls = cls.__header_schema__
    return entity_reader(header_cls), entity_reader(cls), cls


def decode_request(prefix: RequestPrefix, frame: bytes) -> tuple[Any, Any]:
    """Decode header and body; raises BadRequest on anything malformed."""
    try:
        read_header, read_body, cls = _request_readers(prefix.api_key, prefix.api_version)
        header, size = read_header(frame, 0)
        # Check every length against the bytes present before the native decoder allocates for it.
        entity_skimmer(cls)(frame, size)
        body, body_size = read_body(frame, size)
    except BadRequest:
        raise
    except Exception as e:  # kio raises a variety of errors on malformed input
        raise BadRequest(f"cannot decode api_key={prefix.api_key} v{prefix.api_version}: {e!r}") from None
    if size + body_size > len(frame):
        raise BadRequest(f"api_key={prefix.api_key} request is longer than its frame")
    # Trailing bytes are tolerated like Kafka does: librdkafka's all-topics Metadata v12 carries some.
    return header, body


@cache
def response_class(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


@cache
def _response_writer(cls: Any) -> Any:
    return entity_writer(cls)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """Size-prefixed response frame for a kio response entity."""
    cls: Any = type(response)
    flexible_header = cls.__flexible__ and api_key != API_VERSIONS_KEY
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", correlation_id))
    if flexible_header:
        out.write(b"\0")  # no tagged fields in the response header
    _response_writer(cls)(out, response)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    result = bytes(data)
    data.release()
    return result


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """Size-prefixed request frame; used by tests and tools that talk raw protocol."""
    _, _, cls = _request_readers(api_key, api_version)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
    )
    out = io.BytesIO()
    entity_writer(header_cls)(out, header)
    entity_writer(cls)(out, body)
    payload = out.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """Decode a response frame (without size prefix): (correlation_id, body). For tests and tools."""
    cls = response_class(api_key, api_version)
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        pos += 1
    body: Any = entity_reader(cls)(frame, pos)[0]
    return correlation_id, body
