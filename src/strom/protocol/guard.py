"""Bounds check of a request body before the native decoder sees it.

kio's native decoder reserves memory for an array from the length on the wire, so a request that
claims 2^32 elements would abort the process before any error could be raised. This skimmer walks
the same schema in Python, checking only lengths against the bytes actually present, and raises
BadLength on the first impossible one. It allocates nothing and touches each field once.

On the way it notes where each ``records`` field lies (``RecordsSpan``), so the produce path can take
record batches straight from the request frame instead of from the decoder's copies.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional


class BadLength(ValueError):
    pass


_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview  # a request frame


class RecordsSpan(NamedTuple):
    """A records field in a frame: its length prefix at ``prefix``, ``size`` bytes at ``start``
    (size -1: null)."""

    prefix: int
    start: int
    size: int


Spans = list[RecordsSpan]
Skim = Callable[[Buffer, int, Spans], int]


def _uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise BadLength("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise BadLength("varint too long")


def _need(buf: Buffer, pos: int, n: int) -> int:
    if n < 0 or pos + n > len(buf):
        raise BadLength(f"length {n} at byte {pos} runs past the end of the request ({len(buf)} bytes)")
    return pos + n


def _skip_tagged_fields(buf: Buffer, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    _need(buf, pos, count)  # every tagged field takes at least 2 bytes
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos = _need(buf, pos, size)
    return pos


def _length(buf: Buffer, pos: int, flexible: bool, is_array: bool) -> tuple[int, int]:
    """(element or byte count, new position); -1 means null."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    if is_array:
        _need(buf, pos, 4)
        return _I32.unpack_from(buf, pos)[0], pos + 4
    return -2, pos  # caller reads its own fixed-size length


def _primitive(kafka_type: str, flexible: bool) -> Skim:
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        return lambda buf, pos, spans: _need(buf, pos, fixed)
    if kafka_type in ("string", "bytes"):
        return _sized(flexible, 2 if kafka_type == "string" else 4)
    if kafka_type == "records":
        sized = _sized(flexible, 4)

        def records(buf: Buffer, pos: int, spans: Spans) -> int:
            end = sized(buf, pos, spans)
            spans.append(_span(buf, pos, end, flexible))
            return end
        return records
    raise BadLength(f"unknown field type {kafka_type}")


def _sized(flexible: bool, width: int) -> Skim:
    """A length-prefixed field: compact (uvarint length + 1) or a classic int16/int32 length."""
    if flexible:
        def compact(buf: Buffer, pos: int, spans: Spans) -> int:
            n, pos = _uvarint(buf, pos)
            return pos if n == 0 else _need(buf, pos, n - 1)
        return compact

    def legacy(buf: Buffer, pos: int, spans: Spans) -> int:
        _need(buf, pos, width)
        n = (_I16 if width == 2 else _I32).unpack_from(buf, pos)[0]
        return pos + width if n < 0 else _need(buf, pos + width, n)
    return legacy


def _span(buf: Buffer, pos: int, end: int, flexible: bool) -> RecordsSpan:
    if flexible:
        n, start = _uvarint(buf, pos)
        return RecordsSpan(pos, start, n - 1)
    n = _I32.unpack_from(buf, pos)[0]
    return RecordsSpan(pos, pos + 4, n if n >= 0 else -1)


def _array(item: Skim, flexible: bool) -> Skim:
    def skim(buf: Buffer, pos: int, spans: Spans) -> int:
        n, pos = _length(buf, pos, flexible, True)
        if n < 0:
            return pos
        _need(buf, pos, n)  # each element takes at least one byte: checked before looping
        for _ in range(n):
            pos = item(buf, pos, spans)
        return pos
    return skim


@cache
def entity_skimmer(cls: Any) -> Skim:
    flexible = bool(cls.__flexible__)
    steps: list[Skim] = []
    fixed_run = 0  # bytes of consecutive fixed-size fields: checked with one step

    def end_fixed_run() -> None:
        nonlocal fixed_run
        if fixed_run:
            steps.append(_fixed(fixed_run))
            fixed_run = 0

    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # tagged fields live in the trailing tagged-field section
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField | EntityField):
            end_fixed_run()
            inner = entity_skimmer(kind.type_)
            if kind.is_array:
                steps.append(_array(inner, flexible))
            elif is_optional(f):
                steps.append(_nullable_entity(inner))
            else:
                steps.append(inner)
            continue
        kafka_type = f.metadata["kafka_type"]
        if not kind.is_array and kafka_type in _FIXED:
            fixed_run += _FIXED[kafka_type]
            continue
        end_fixed_run()
        if kind.is_array and kafka_type in _FIXED:
            steps.append(_fixed_array(_FIXED[kafka_type], flexible))
        else:
            prim = _primitive(kafka_type, flexible)
            steps.append(_array(prim, flexible) if kind.is_array else prim)
    end_fixed_run()
    if flexible:
        steps.append(_skip_tagged)
    if len(steps) == 1:
        return steps[0]

    def skim(buf: Buffer, pos: int, spans: Spans) -> int:
        for step in steps:
            pos = step(buf, pos, spans)
        return pos
    return skim


def _fixed(size: int) -> Skim:
    return lambda buf, pos, spans: _need(buf, pos, size)


def _fixed_array(size: int, flexible: bool) -> Skim:
    def skim(buf: Buffer, pos: int, spans: Spans) -> int:
        n, pos = _length(buf, pos, flexible, True)
        return pos if n < 0 else _need(buf, pos, n * size)
    return skim


def _skip_tagged(buf: Buffer, pos: int, spans: Spans) -> int:
    if pos < len(buf) and buf[pos] == 0:  # the usual case: no tagged fields
        return pos + 1
    return _skip_tagged_fields(buf, pos)


def _nullable_entity(inner: Skim) -> Skim:
    def skim(buf: Buffer, pos: int, spans: Spans) -> int:
        _need(buf, pos, 1)
        if buf[pos] == 0xFF:  # int8 -1 marks null
            return pos + 1
        return inner(buf, pos + 1, spans)
    return skim
