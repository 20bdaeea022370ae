"""fastwrite's dict writers must give byte for byte what ``build()`` and the entity writer give.

Every response class of every version the broker serves is given generated handler dicts, in the
forms handlers and build() use: error codes as ints or ErrorCode, durations as int milliseconds or
timedeltas, timestamps as int milliseconds, datetimes or None, arrays as lists or tuples or None,
nested entities as dicts or as built kio entities, keys missing, keys of other versions, tagged fields
left out, at their defaults or set. Then a few realistic large responses go through
``wire.encode_response_dict`` and are compared with ``wire.encode_response(build(...))``.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional
from test_fastwrite import _PRIMITIVES, SERVED, _fetch_body, _metadata_body, _nested, entity_strategy

from strom.protocol import fastwrite, splice, wire
from strom.protocol.build import build

_MS = datetime.timedelta(milliseconds=1)


def reference(cls: type, data: dict[str, Any]) -> bytes:
    out = bytearray()
    fastwrite.entity_writer(cls)(out, build(cls, data))
    return bytes(out)


def from_dict(cls: type, data: dict[str, Any]) -> bytes:
    out = bytearray()
    fastwrite.dict_writer(cls)(out, data)
    return bytes(out)


# Handler forms of the values build() converts, besides the converted forms themselves.
_HANDLER_FORMS: dict[str, st.SearchStrategy[Any]] = {
    "error_code": st.sampled_from([0, 1, 3, 35, 58, -1, 119]),
    "timedelta_i32": st.integers(-(2**31), 2**31 - 1),
    "timedelta_i64": st.integers(-(2**40), 2**40),
    "datetime_i64": st.integers(0, 2**45),
}


def _value_strategy(f: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField | EntityField):
        inner = st.one_of(dict_strategy(kind.type_), entity_strategy(kind.type_))
    else:
        kafka_type = f.metadata["kafka_type"]
        inner = _PRIMITIVES[kafka_type]
        if kafka_type in _HANDLER_FORMS and not kind.is_array:  # build() leaves array elements as they are
            inner = st.one_of(inner, _HANDLER_FORMS[kafka_type])
        if kafka_type == "uuid":
            inner = st.one_of(inner, st.none())
    if kind.is_array:
        inner = st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple), st.none())
    if get_field_tag(f) is not None:
        return st.one_of(st.just(get_tagged_field_default(f)), inner)
    return st.one_of(st.none(), inner) if is_optional(f) else inner


@cache
def dict_strategy(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    """Handler dicts for ``cls``: each field present or not (missing ones take build()'s value),
    plus keys the class does not have."""
    fields = dataclasses.fields(cls)
    return st.fixed_dictionaries(
        {}, optional={**{f.name: _value_strategy(f) for f in fields},
                      "not_a_field": st.integers(), "other_version_field": st.text(max_size=3)})


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=[f"key{k}-v{v}" for k, v in SERVED])
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_dicts_encode_as_built_entities(api_key: int, version: int, data: st.DataObject) -> None:
    cls = wire.response_class(api_key, version)
    body = data.draw(dict_strategy(cls))
    assert from_dict(cls, body) == reference(cls, body)


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=[f"key{k}-v{v}" for k, v in SERVED])
def test_empty_dict_takes_defaults(api_key: int, version: int) -> None:
    cls = wire.response_class(api_key, version)
    assert from_dict(cls, {}) == reference(cls, {})


# --- the forms build() accepts, one by one -----------------------------------------------------------

def test_converted_values_in_either_form() -> None:
    cls = wire.response_class(1, 12)
    as_ints = {"throttle_time": 250, "error_code": 3, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 6, "high_watermark": 1}]}]}
    part_cls = _nested(cls, "responses", "partitions")
    as_objects = {"throttle_time": datetime.timedelta(milliseconds=250), "error_code": build(cls, as_ints).error_code,
                  "responses": ({"topic": "t", "partitions": (build(part_cls, as_ints["responses"][0]["partitions"][0]),)},)}
    assert from_dict(cls, as_ints) == from_dict(cls, as_objects) == reference(cls, as_ints)


def test_sub_millisecond_and_huge_durations_round_as_kio_does() -> None:
    cls = wire.response_class(0, 9)
    for throttle in [datetime.timedelta(microseconds=1500), datetime.timedelta(microseconds=-2500), 2**31 - 1,
                     -(2**31), True, 7.9, datetime.timedelta(milliseconds=2**31 - 1)]:
        body = {"throttle_time": throttle}
        assert from_dict(cls, body) == reference(cls, body), throttle


def test_unknown_error_code_is_rejected_as_build_rejects_it() -> None:
    cls = wire.response_class(0, 9)
    with pytest.raises(ValueError):
        build(cls, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 12345}]}]})
    with pytest.raises(ValueError):
        from_dict(cls, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 12345}]}]})


def test_arrays_from_other_iterables_and_null_arrays() -> None:
    cls = wire.response_class(3, 12)
    body = {"brokers": iter([{"node_id": 1, "host": "h", "port": 1}]),
            "topics": [{"name": "t", "partitions": ({"partition_index": p, "replica_nodes": range(3), "isr_nodes": None}
                                                    for p in range(2))}]}
    again = {"brokers": [{"node_id": 1, "host": "h", "port": 1}],
             "topics": [{"name": "t", "partitions": [{"partition_index": p, "replica_nodes": [0, 1, 2], "isr_nodes": None}
                                                     for p in range(2)]}]}
    assert from_dict(cls, body) == reference(cls, again)


@pytest.mark.parametrize("version", [12, 16])
def test_fetch_tagged_fields_as_dicts_entities_and_defaults(version: int) -> None:
    cls = wire.response_class(1, version)
    part_cls = _nested(cls, "responses", "partitions")
    leader_cls = _nested(part_cls, "current_leader")
    key = "topic_id" if version >= 13 else "topic"
    parts = [{"partition_index": 0, "records": b"r", "diverging_epoch": {"epoch": 3, "end_offset": 1 << 40}},
             {"partition_index": 1, "current_leader": leader_cls(leader_id=2, leader_epoch=9)},
             {"partition_index": 2, "snapshot_id": {}, "current_leader": {"leader_id": -1}},  # equal to the defaults
             {"partition_index": 3, "snapshot_id": {"epoch": 1}}]
    body = {"responses": [{key: uuid.UUID(int=5) if version >= 13 else "t",
                           "partitions": parts}]}
    assert from_dict(cls, body) == reference(cls, body)


# --- realistic responses, whole frames ----------------------------------------------------------

def _spliced_fetch_body(version: int) -> dict[str, Any]:
    """A fetch handler's result: large records replaced by splice markers, the splicer alongside."""
    body = _fetch_body(version, 1000)
    blobs = splice.BlobSplicer()
    for topic in body["responses"]:
        for part in topic["partitions"]:
            if part["records"] is not None:
                part["records"] = blobs.hold(part["records"])
    body[splice.RESULT_KEY] = blobs
    return body


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_with_1000_partitions(version: int) -> None:
    body = _spliced_fetch_body(version)
    blobs = body.pop(splice.RESULT_KEY)
    assert len(blobs) > 100
    frame = wire.encode_response_dict(1, version, 77, body)
    assert frame == wire.encode_response(1, version, 77, build(wire.response_class(1, version), body))
    compact = wire.response_class(1, version).__flexible__
    assert b"".join(blobs.splice(frame, compact=compact)) == wire.encode_response(
        1, version, 77, build(wire.response_class(1, version), _unspliced(body, blobs)))


def _unspliced(body: dict[str, Any], blobs: splice.BlobSplicer) -> dict[str, Any]:
    """``body`` with the blobs back in place of their markers."""
    held = {blobs._prefix + splice._INT32.pack(i): blob for i, blob in enumerate(blobs._blobs)}
    return {**body, "responses": [{**t, "partitions": [{**p, "records": held.get(p["records"], p["records"])}
                                                       for p in t["partitions"]]} for t in body["responses"]]}


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_metadata_with_topics_and_partitions(version: int) -> None:
    body = _metadata_body()
    assert wire.encode_response_dict(3, version, 5, body) == wire.encode_response(
        3, version, 5, build(wire.response_class(3, version), body))


@pytest.mark.parametrize("version", range(5))
def test_api_versions_header_stays_v0(version: int) -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    assert wire.encode_response_dict(18, version, 1, body) == wire.encode_response(
        18, version, 1, build(wire.response_class(18, version), body))


@pytest.mark.parametrize("ms", [-62135596800000, -62135596800001, 253402300799999, 253402300800000, -1, 0, 1,
                                1_700_000_000_123, -86_400_001])
def test_timestamps_given_as_ints_at_the_edges(ms: int) -> None:
    """Int timestamps skip the datetime in the dict writer; kio's round trip gives the same, and
    both refuse what datetime cannot hold."""
    cls = wire.response_class(0, 9)
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "log_append_time": ms}]}]}
    try:
        expected = reference(cls, body)
    except (ValueError, OverflowError):
        with pytest.raises((ValueError, OverflowError)):
            from_dict(cls, body)
        return
    assert from_dict(cls, body) == expected
