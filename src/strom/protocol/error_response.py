"""A whole-request error response for any API, built from the request (Kafka's getErrorResponse).

Kafka answers a request it refuses as a whole with the API's own response in which every error
code says why: each topic and partition the request named comes back with the error, and so does
the top-level code where the schema has one. Clients then handle it exactly as a per-partition
error from a real broker (retry, refresh metadata, report to the application).

This builds that response generically from the kio schemas, as a handler-style dict that the
connection encodes for the negotiated version:

- every ``error_code`` field, at any depth, gets the error;
- a response array of entities mirrors the request array it answers: the one with the same name,
  else the one whose elements share identifying fields (Produce's ``topic_data`` ->
  ``responses``, ``partition_data`` -> ``partition_responses``), else a request array of plain
  values (OffsetFetch's ``partition_indexes``, FindCoordinator's ``coordinator_keys``). Each
  element keeps the request's identity (topic name or id, partition index, group id, key);
- other arrays (brokers, members, aborted transactions) are empty, and the numbers Kafka sets to
  -1 on an error (offsets, generation, node id, leader) are -1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

# Response field -> request fields that carry the same identity, in the order tried.
_IDENTITY: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "topic_id": ("topic_id",),
    "partition_index": ("partition_index", "partition", "index"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id",),
    "key": ("key",),
    "transactional_id": ("transactional_id",),
    "resource_name": ("resource_name",),
    "resource_type": ("resource_type",),
}
_IDENTIFYING = {alias for aliases in _IDENTITY.values() for alias in aliases}

# Numbers Kafka's error responses carry as -1 ("unknown"), by field name.
_UNKNOWN = frozenset({
    "base_offset", "offset", "committed_offset", "high_watermark", "last_stable_offset", "log_start_offset",
    "timestamp", "log_append_time", "log_append_time_ms", "generation_id", "node_id", "port", "leader_id",
    "leader_epoch", "committed_leader_epoch", "controller_id", "preferred_read_replica", "producer_id",
    "producer_epoch",
})
_INTEGERS = frozenset({"int8", "int16", "int32", "int64", "datetime_i64"})


def error_response(request: Any, response_cls: type, error_code: int, message: str | None = None) -> dict[str, Any]:
    """The response of class ``response_cls`` refusing all of ``request`` with ``error_code``;
    ``message`` goes into every ``error_message`` field the version has."""
    return _entity(request, response_cls, int(error_code), message)


def _entity(source: Any, cls: type, code: int, message: str | None) -> dict[str, Any]:
    """Response entity ``cls`` answering request entity ``source`` (None: nothing to mirror)."""
    out: dict[str, Any] = {}
    request_fields = _fields_of(source)
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        name = f.name
        if isinstance(kind, EntityTupleField):
            matched = _matching_array(source, request_fields, name, kind.type_)
            out[name] = [] if matched is None else [_element(item, kind.type_, code, message) for item in matched]
        elif isinstance(kind, EntityField):
            if get_field_tag(f) is None:  # a tagged struct keeps its default; a plain one is written
                out[name] = _entity(None, kind.type_, code, message)
        elif isinstance(kind, PrimitiveTupleField):
            out[name] = []
        else:
            kafka_type = get_schema_field_type(f)
            if kafka_type == "error_code":
                out[name] = code
            elif name == "error_message":
                out[name] = message
            elif kafka_type == "records":
                out[name] = b""  # an empty record set, as Kafka sends with a partition error
            elif name in _UNKNOWN and kafka_type in _INTEGERS:
                out[name] = -1
            elif source is not None and name in _IDENTITY:
                value = _identity_value(source, request_fields, name)
                if value is not _NONE:
                    out[name] = value
    return out


_NONE = object()


def _fields_of(source: Any) -> dict[str, dataclasses.Field[Any]]:
    if source is None or not dataclasses.is_dataclass(source):
        return {}
    return {f.name: f for f in dataclasses.fields(source)}


def _identity_value(source: Any, request_fields: dict[str, dataclasses.Field[Any]], name: str) -> Any:
    for alias in _IDENTITY[name]:
        if alias in request_fields:
            return getattr(source, alias)
    return _NONE


def _element(item: Any, cls: type, code: int, message: str | None) -> dict[str, Any]:
    """One element of a mirrored array: from a request entity, or from a plain value (a partition
    index, a coordinator key) given to the response's identifying field of that type."""
    if dataclasses.is_dataclass(item):
        return _entity(item, cls, code, message)
    out = _entity(None, cls, code, message)
    wanted = "string" if isinstance(item, str) else "int32"
    for f in dataclasses.fields(cls):
        if f.name in _IDENTITY and get_schema_field_type(f) == wanted:
            out[f.name] = item
            break
    return out


def _matching_array(source: Any, request_fields: dict[str, dataclasses.Field[Any]], name: str,
                    element_cls: type) -> Any:
    """The request array (a tuple, or None) that response array ``name`` answers, if any."""
    if source is None:
        return None
    wanted = {f.name for f in dataclasses.fields(element_cls)}
    wanted_ids = {alias for f in wanted if f in _IDENTITY for alias in _IDENTITY[f]}
    best: tuple[int, str] | None = None
    plain: str | None = None
    for field_name, f in request_fields.items():
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            have = {g.name for g in dataclasses.fields(kind.type_)}
            shared_ids = have & wanted_ids & _IDENTIFYING
            if field_name == name and (shared_ids or not wanted_ids):
                return getattr(source, field_name)
            if shared_ids:
                score = len(have & (wanted | wanted_ids))
                if best is None or score > best[0]:  # ties: the first declared (topics before forgotten ones)
                    best = (score, field_name)
        elif isinstance(kind, PrimitiveTupleField) and plain is None:
            value_type = get_schema_field_type(f)
            if any(g.name in _IDENTITY and get_schema_field_type(g) == value_type
                   for g in dataclasses.fields(element_cls)):
                plain = field_name
    if best is not None:
        return getattr(source, best[1])
    if plain is not None:
        return getattr(source, plain)
    return None
