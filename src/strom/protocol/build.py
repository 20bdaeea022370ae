"""Build kio response entities from plain dicts, for any version.

Handlers return version-independent dicts (field name -> value, nested lists of dicts). This module
turns them into the kio dataclass of the negotiated version: fields the version lacks are dropped,
fields the handler did not set get Kafka's zero value. Integers are accepted for error codes and
millisecond durations.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

_ZERO_UUID = uuid.UUID(int=0)
Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _to_error_code(value: Any) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


def _to_timedelta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _to_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    from kio._kio_native import tz_aware_from_i64

    return tz_aware_from_i64(value)


_CONVERTERS: dict[str, Converter] = {
    "error_code": _to_error_code,
    "timedelta_i32": _to_timedelta,
    "timedelta_i64": _to_timedelta,
    "datetime_i64": _to_datetime,
}

_ZEROS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint8": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": _ZERO_UUID,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    # A non-nullable timestamp (DescribeTransactions' start time) has no "null": the epoch.
    "datetime_i64": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
}


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    nested: type | None  # entity class for entity fields
    is_array: bool
    convert: Converter
    zero: Any
    has_default: bool


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plans = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if isinstance(kind, EntityTupleField | EntityField):
            # Kafka's zero of a struct that cannot be null is the struct with its fields' zeros.
            entity_zero = () if kind.is_array else (None if is_optional(f) else build(kind.type_, {}))
            plans.append(_FieldPlan(f.name, kind.type_, kind.is_array, _identity, entity_zero, has_default))
            continue
        kafka_type = f.metadata.get("kafka_type", "")
        zero: Any = () if kind.is_array else (None if is_optional(f) else _ZEROS.get(kafka_type))
        plans.append(
            _FieldPlan(f.name, None, kind.is_array, _CONVERTERS.get(kafka_type, _identity), zero, has_default)
        )
    return tuple(plans)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """Instantiate kio entity ``cls`` from ``data``; unknown keys are ignored (other versions' fields)."""
    kwargs: dict[str, Any] = {}
    for p in _plan(cls):
        if p.name in data:
            value = data[p.name]
            if p.nested is not None:
                if p.is_array and value is not None:  # None: a null array (e.g. aborted_transactions)
                    value = tuple(v if isinstance(v, p.nested) else build(p.nested, v) for v in value)
                elif value is not None and not isinstance(value, p.nested):
                    value = build(p.nested, value)
            elif value is not None:
                value = tuple(value) if p.is_array else p.convert(value)
            kwargs[p.name] = value
        elif not p.has_default:
            kwargs[p.name] = p.zero
    return cls(**kwargs)
