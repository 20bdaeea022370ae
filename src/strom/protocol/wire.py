"""Kafka request/response framing and headers, sans-IO.

A request frame is a 4-byte big-endian size followed by the header and body. Request header v1 is
api key, api version, correlation id and a classic int16 client id; v2 (flexible APIs) adds tagged
fields. Response header v0 is the correlation id; v1 adds tagged fields, except ApiVersions whose
response header is always v0 so clients can read it before they know our versions.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from strom.protocol import fastwrite
from strom.protocol.guard import RecordsSpan, entity_skimmer

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_PREFIX = struct.Struct(">hhi")


class FrameTooLarge(Exception):
    pass


class BadRequest(Exception):
    """The request cannot be decoded; the connection is closed."""


class FrameDecoder:
    """Accumulates bytes from the socket and yields whole frames (without the size prefix).

    For ``asyncio.BufferedProtocol``: the transport reads straight into the buffer ``get_buffer``
    hands out. Small frames are parsed out of one reusable read buffer; a frame too large for it
    gets a buffer of its own, of its announced size, that the socket fills in place and that is then
    handed on as the frame itself (a writable bytearray), so a large Produce request is not copied on
    its way in and its batches can be given their offsets where they lie.
    """

    # Per connection, so kept small: frames over half of it get a buffer of their own anyway.
    READ_BUFFER = 64 * 1024
    # A large frame's buffer starts at this size (most Produce requests fit) and doubles as needed.
    LARGE_STEP = 1 << 20

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray(self.READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of the bytes read into _buf
        self._large: bytearray | None = None  # the frame being filled in place, if any
        self._large_size = 0  # its announced size (the buffer grows towards it)
        self._filled = 0

    def get_buffer(self) -> memoryview:
        if self._large is not None:
            if self._filled == len(self._large):
                # Grow by doubling as bytes arrive: memory follows what was sent, not what a size
                # prefix claims. (Here, not in buffer_updated: the transport holds the last view
                # until that returns, and a bytearray with a view on it cannot be resized.)
                self._large += bytes(min(len(self._large), self._large_size - len(self._large)))
            return memoryview(self._large)[self._filled :]
        if self._end == len(self._buf):
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes | bytearray]:
        if self._large is not None:
            self._filled += nbytes
            if self._filled < self._large_size:
                return []
            frame = self._large
            self._large, self._filled = None, 0
            return [frame]
        self._end += nbytes
        return self._parse()

    def feed(self, data: bytes) -> list[bytes | bytearray]:
        """Push bytes from elsewhere (tests, tools reading a stream) through the same parser."""
        frames: list[bytes | bytearray] = []
        data_view = memoryview(data)
        while data_view:
            with self.get_buffer() as target:  # released before the buffer may grow, as a transport does
                n = min(len(target), len(data_view))
                target[:n] = data_view[:n]
            data_view = data_view[n:]
            frames += self.buffer_updated(n)
        return frames

    def _parse(self) -> list[bytes | bytearray]:
        frames: list[bytes | bytearray] = []
        buf, pos, end = self._buf, self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame}")
            if end - pos - 4 >= size:
                frames.append(bytes(self._view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size > len(buf) // 2:
                # Too large to wait for here: give it its own buffer and let the socket fill it.
                have = end - pos - 4
                self._large = bytearray(max(min(size, self.LARGE_STEP), have))
                self._large[:have] = self._view[pos + 4 : end]
                self._large_size = size
                self._filled = have
                pos = end
            break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        if self._large is None and len(buf) - end < len(buf) // 2 and pos:
            self._compact()
        return frames

    def _compact(self) -> None:
        """Move the unparsed tail to the front of the read buffer."""
        tail = self._end - self._start
        # Through a copy: the source and target ranges may overlap.
        self._buf[:tail] = bytes(self._view[self._start : self._end])
        self._start, self._end = 0, tail

    @property
    def buffered(self) -> int:
        return self._end - self._start + self._filled


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    api_key: int
    api_version: int
    correlation_id: int


def read_prefix(frame: bytes | bytearray | memoryview) -> RequestPrefix:
    if len(frame) < 8:
        raise BadRequest("request shorter than its header")
    return RequestPrefix(*_PREFIX.unpack_from(frame, 0))


@cache
def _request_readers(api_key: int, api_version: int) -> tuple[Any, Any, Any]:
    cls = load_request_schema(api_key, api_version)
    header_cls = cls.__header_schema__
    return entity_reader(header_cls), entity_reader(cls), cls


def decode_header(prefix: RequestPrefix, frame: bytes | bytearray | memoryview) -> tuple[Any, int]:
    """The request header and where the body starts; raises BadRequest on anything malformed."""
    try:
        read_header, _, _ = _request_readers(prefix.api_key, prefix.api_version)
        header, size = read_header(frame if isinstance(frame, bytes) else memoryview(frame).toreadonly(), 0)
    except Exception as e:  # kio raises a variety of errors on malformed input
        raise BadRequest(f"cannot decode api_key={prefix.api_key} v{prefix.api_version}: {e!r}") from None
    return header, int(size)


def decode_request(prefix: RequestPrefix, frame: bytes | bytearray | memoryview) -> tuple[Any, Any]:
    """Decode header and body; raises BadRequest on anything malformed.

    ``records`` fields (Produce) come back as memoryviews of ``frame`` rather than as copies made by
    the decoder: writable when ``frame`` is (a large frame read in place), so offsets can be
    assigned in the request's own bytes.
    """
    view = frame if isinstance(frame, bytes) else memoryview(frame).toreadonly()  # kio reads read-only
    try:
        read_header, read_body, cls = _request_readers(prefix.api_key, prefix.api_version)
        header, size = read_header(view, 0)
        # Check every length against the bytes present before the native decoder allocates for it.
        spans: list[RecordsSpan] = []
        end = entity_skimmer(cls)(view, size, spans)
        if spans:
            # Decode a copy of the frame without the record bytes, then put views of them back.
            body, _ = read_body(_without_records(view, size, end, spans, cls.__flexible__), 0)
            records = memoryview(frame)
            body = _with_records(body, iter([None if sp.size < 0 else records[sp.start : sp.start + sp.size]
                                             for sp in spans]))
        else:
            body, body_size = read_body(view, size)
            end = size + body_size
    except BadRequest:
        raise
    except Exception as e:  # kio raises a variety of errors on malformed input
        raise BadRequest(f"cannot decode api_key={prefix.api_key} v{prefix.api_version}: {e!r}") from None
    if end > len(frame):
        raise BadRequest(f"api_key={prefix.api_key} request is longer than its frame")
    # Trailing bytes are tolerated like Kafka does: librdkafka's all-topics Metadata v12 carries some.
    return header, body


_NULL_RECORDS = {True: b"\0", False: b"\xff\xff\xff\xff"}  # compact (uvarint 0) / int32 -1


def _without_records(view: bytes | memoryview, start: int, end: int, spans: list[RecordsSpan],
                     flexible: bool) -> bytes:
    pieces: list[bytes | memoryview] = []
    pos = start
    for sp in spans:
        if sp.size < 0:
            continue  # already null
        pieces += (view[pos : sp.prefix], _NULL_RECORDS[flexible])
        pos = sp.start + sp.size
    pieces.append(view[pos:end])
    return b"".join(pieces)


@cache
def _records_fields(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """The fields of ``cls`` that are or hold records fields: (name, nested entity class or None
    for the records field itself, is an array)."""
    out: list[tuple[str, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField | EntityField):
            if _records_fields(kind.type_):
                out.append((f.name, kind.type_, kind.is_array))
        elif f.metadata.get("kafka_type") == "records" and "tag" not in f.metadata:
            out.append((f.name, None, False))
    return tuple(out)


def _with_records(entity: Any, records: Iterator[memoryview | None]) -> Any:
    """``entity`` with its records fields taken, in wire order, from ``records``."""
    changes: dict[str, Any] = {}
    cls: type = type(entity)
    for name, nested, is_array in _records_fields(cls):
        value = getattr(entity, name)
        if nested is None:
            changes[name] = next(records)
        elif value is not None:
            changes[name] = tuple(_with_records(v, records) for v in value) if is_array \
                else _with_records(value, records)
    return dataclasses.replace(entity, **changes) if changes else entity


@cache
def response_class(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


def request_class(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


_HEAD = struct.Struct(">ii")  # size (filled in last) and correlation id
_HEAD_TAGGED = struct.Struct(">iix")  # ... and an empty tagged-field section (response header v1)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """Size-prefixed response frame for a kio response entity.

    The body goes through fastwrite's writer compiled for its class; kio's ``entity_writer`` writes
    the same bytes (tests/test_fastwrite.py holds them to it) but is several times slower.
    """
    cls: Any = type(response)
    flexible_header = cls.__flexible__ and api_key != API_VERSIONS_KEY
    out = bytearray((_HEAD_TAGGED if flexible_header else _HEAD).pack(0, correlation_id))
    fastwrite.entity_writer(cls)(out, response)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response_dict(api_key: int, api_version: int, correlation_id: int, data: Mapping[str, Any]) -> bytes:
    """Size-prefixed response frame for a handler's result dict: the frame ``encode_response`` makes
    of ``build(response_class(...), data)``, written straight from the dict (building the entities
    cost several times the encoding)."""
    cls: Any = response_class(api_key, api_version)
    flexible_header = cls.__flexible__ and api_key != API_VERSIONS_KEY
    out = bytearray((_HEAD_TAGGED if flexible_header else _HEAD).pack(0, correlation_id))
    fastwrite.dict_writer(cls)(out, data)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response_body(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """Size-prefixed response frame around ``body``, a response body already encoded (the bytes
    ``encode_response_dict`` writes after the response header)."""
    flexible_header = response_class(api_key, api_version).__flexible__ and api_key != API_VERSIONS_KEY
    head = (_HEAD_TAGGED if flexible_header else _HEAD).pack(len(body) + (5 if flexible_header else 4),
                                                              correlation_id)
    return head + body


def response_header_size(api_key: int, api_version: int) -> int:
    """Bytes before a response's body in a frame: size, correlation id (and tagged fields)."""
    return 9 if response_class(api_key, api_version).__flexible__ and api_key != API_VERSIONS_KEY else 8


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


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """Decode a response frame (without size prefix): (correlation_id, body). For tests and tools."""
    cls = response_class(api_key, api_version)
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        pos += 1
    body: Any = entity_reader(cls)(frame, pos)[0]
    return correlation_id, body
