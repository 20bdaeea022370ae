"""fastwrite's compiled writers must give byte for byte what kio's ``entity_writer`` gives.

Every response class of every version the broker serves is filled with generated values (each
kafka_type within Kafka's ranges, nullable fields sometimes null, arrays of 0-3 elements, tagged
fields at their defaults or set) and encoded both ways; then a few realistic responses, large ones
among them, go through ``wire.encode_response`` and are compared with the frame kio's writer makes.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import os
import struct
import uuid
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer as kio_entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional

from strom.broker.handlers import discover
from strom.protocol import fastwrite, wire
from strom.protocol.build import build

UTC = datetime.UTC


def _served() -> list[tuple[int, int]]:
    return [(h.api_key, v) for h in sorted(discover().values(), key=lambda h: h.api_key)
            for v in range(h.min_version, h.max_version + 1)]


SERVED = _served()


def kio_bytes(entity: Any) -> bytes:
    buf = io.BytesIO()
    kio_entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def fast_bytes(entity: Any) -> bytes:
    out = bytearray()
    fastwrite.entity_writer(type(entity))(out, entity)
    return bytes(out)


def kio_frame(api_key: int, version: int, correlation_id: int, response: Any) -> bytes:
    """The response frame as wire.encode_response made it with kio's writer."""
    flexible_header = type(response).__flexible__ and api_key != wire.API_VERSIONS_KEY
    body = struct.pack(">i", correlation_id) + (b"\0" if flexible_header else b"") + kio_bytes(response)
    return struct.pack(">i", len(body)) + body


# --- generated entities -------------------------------------------------------------------------

def _ints(bits: int, signed: bool = True) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.integers(0, 2**bits - 1)


# Sub-millisecond parts too: both writers must round them the same way.
_MS = datetime.timedelta(milliseconds=1)
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": _ints(8), "int16": _ints(16), "int32": _ints(32), "int64": _ints(64),
    "uint8": _ints(8, False), "uint16": _ints(16, False), "uint32": _ints(32, False), "uint64": _ints(64, False),
    "float64": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=16),
    "records": st.binary(max_size=40),
    "uuid": st.one_of(st.uuids(), st.just(uuid.UUID(int=0))),
    "error_code": st.sampled_from(list(ErrorCode)),
    "timedelta_i32": st.one_of(st.integers(-(2**31), 2**31 - 1).map(lambda ms: ms * _MS),
                               st.timedeltas(min_value=-(2**31) * _MS, max_value=(2**31 - 1) * _MS)),
    "timedelta_i64": st.one_of(st.integers(-(2**40), 2**40).map(lambda ms: ms * _MS), st.timedeltas()),
    "datetime_i64": st.datetimes(min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(9999, 1, 1),
                                 timezones=st.sampled_from([UTC, datetime.timezone(datetime.timedelta(hours=5))])),
}


def _field_strategy(f: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField | EntityField):
        inner = entity_strategy(kind.type_)
    else:
        inner = _PRIMITIVES[f.metadata["kafka_type"]]
        if f.metadata["kafka_type"] == "uuid":
            inner = st.one_of(inner, st.none())  # kio writes a null uuid as zero, nullable or not
    if kind.is_array:
        inner = st.lists(inner, max_size=3).map(tuple)
    tag = get_field_tag(f)
    if tag is not None:
        return st.one_of(st.just(get_tagged_field_default(f)), inner)
    return st.one_of(st.none(), inner) if is_optional(f) else inner


@cache
def entity_strategy(cls: type) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{f.name: _field_strategy(f) for f in dataclasses.fields(cls)})


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=[f"key{k}-v{v}" for k, v in SERVED])
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_responses_encode_as_kio_does(api_key: int, version: int, data: st.DataObject) -> None:
    entity = data.draw(entity_strategy(wire.response_class(api_key, version)))
    assert fast_bytes(entity) == kio_bytes(entity)


# Not served yet, but they hold what the served ones lack: nullable structs (KIP-893) and the request
# header's client_id, which Kafka keeps as a classic string in flexible versions.
BEYOND = ["kio.schema.consumer_group_heartbeat.v1.response:ConsumerGroupHeartbeatResponse",
          "kio.schema.describe_topic_partitions.v0.response:DescribeTopicPartitionsResponse",
          "kio.schema.streams_group_describe.v0.response:StreamsGroupDescribeResponse",
          "kio.schema.request_header.v1.header:RequestHeader",
          "kio.schema.request_header.v2.header:RequestHeader"]


@pytest.mark.parametrize("path", BEYOND, ids=[p.split(":")[0].split(".", 2)[2] for p in BEYOND])
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(data=st.data())
def test_other_shapes_encode_as_kio_does(path: str, data: st.DataObject) -> None:
    module, name = path.split(":")
    entity = data.draw(entity_strategy(getattr(importlib.import_module(module), name)))
    assert fast_bytes(entity) == kio_bytes(entity)


def test_every_served_class_gets_a_writer() -> None:
    assert len(SERVED) > 100
    for api_key, version in SERVED:
        assert callable(fastwrite.entity_writer(wire.response_class(api_key, version)))


# --- tagged fields ------------------------------------------------------------------------------

def test_tagged_fields_at_default_by_value_are_not_written() -> None:
    """A tagged entity equal to its default but not the schema's own instance is still left out."""
    mod = wire.response_class(1, 12)
    part_cls = _nested(mod, "responses", "partitions")
    defaults = {f.name: get_tagged_field_default(f) for f in dataclasses.fields(part_cls) if get_field_tag(f) is not None}
    fresh = {name: type(d)() for name, d in defaults.items()}
    resp = build(mod, {"responses": [{"topic": "t", "partitions": [dict(partition_index=0, records=b"x", **fresh)]}]})
    assert resp.responses[0].partitions[0].diverging_epoch is not defaults["diverging_epoch"]
    assert fast_bytes(resp) == kio_bytes(resp)


@pytest.mark.parametrize("version", [12, 16])
def test_fetch_partition_tagged_fields_set(version: int) -> None:
    cls = wire.response_class(1, version)
    part_cls = _nested(cls, "responses", "partitions")
    types = {f.name: classify_field(f).type_ for f in dataclasses.fields(part_cls) if get_field_tag(f) is not None}
    key = "topic_id" if version >= 13 else "topic"
    parts = [{"partition_index": 0, "records": b"r" * 200,
              "diverging_epoch": types["diverging_epoch"](epoch=3, end_offset=1 << 40)},
             {"partition_index": 1, "records": None, "current_leader": types["current_leader"](leader_id=2, leader_epoch=9),
              "snapshot_id": types["snapshot_id"](end_offset=7, epoch=1)}]
    resp = build(cls, {"responses": [{key: uuid.uuid4() if version >= 13 else "t", "partitions": parts}]})
    assert fast_bytes(resp) == kio_bytes(resp)


def test_api_versions_tagged_features() -> None:
    cls = wire.response_class(18, 3)
    feature = _nested(cls, "supported_features")
    finalized = _nested(cls, "finalized_features")
    resp = build(cls, {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}],
                       "supported_features": [feature(name="metadata.version", min_version=1, max_version=20)],
                       "finalized_features_epoch": 5,
                       "finalized_features": [finalized(name="f" * 130, max_version_level=2, min_version_level=1)],
                       "zk_migration_ready": True})
    assert fast_bytes(resp) == kio_bytes(resp)


def _nested(cls: type, *path: str) -> type:
    """The entity class at ``path`` (field names through arrays and structs) below ``cls``."""
    for name in path:
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        cls = classify_field(field).type_
    return cls


# --- realistic responses, whole frames ----------------------------------------------------------

def _fetch_body(version: int, partitions: int) -> dict[str, Any]:
    key = "topic_id" if version >= 13 else "topic"
    sizes = [0, 90, 300, 5000, 70_000]
    parts = [{"partition_index": i, "error_code": 3 if i % 97 == 0 else 0, "high_watermark": 10_000 + i,
              "last_stable_offset": 10_000 + i, "log_start_offset": i,
              "aborted_transactions": [{"producer_id": i, "first_offset": 5}] if i % 50 == 0 else None,
              "preferred_read_replica": -1, "records": None if i % 333 == 0 else os.urandom(sizes[i % len(sizes)])}
             for i in range(partitions)]
    topics = [{key: uuid.UUID(int=t + 1) if version >= 13 else f"topic-{t}", "partitions": parts[t * 100:(t + 1) * 100]}
              for t in range(partitions // 100)]
    return {"throttle_time": 0, "error_code": 0, "session_id": 12, "responses": topics}


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_with_1000_partitions(version: int) -> None:
    resp = build(wire.response_class(1, version), _fetch_body(version, 1000))
    assert wire.encode_response(1, version, 77, resp) == kio_frame(1, version, 77, resp)


def _metadata_body() -> dict[str, Any]:
    """A Metadata response of 10 topics x 40 partitions, an unknown topic and two brokers."""
    topics = [{"name": f"topic-{t}", "topic_id": uuid.UUID(int=t + 1), "error_code": 0, "is_internal": t == 0,
               "partitions": [{"partition_index": p, "leader_id": 1, "leader_epoch": 4, "replica_nodes": [1, 2, 3],
                               "isr_nodes": [1, 2], "offline_replicas": [3] if p == 0 else []} for p in range(40)],
               "topic_authorized_operations": -2147483648} for t in range(10)]
    topics.append({"name": "missing", "error_code": 3, "partitions": []})
    return {"throttle_time": 0, "cluster_id": "strom-cluster", "controller_id": 1,
            "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None},
                        {"node_id": 2, "host": "broker-2.example", "port": 9093, "rack": "r1"}],
            "topics": topics}


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_metadata_with_topics_and_partitions(version: int) -> None:
    resp = build(wire.response_class(3, version), _metadata_body())
    assert wire.encode_response(3, version, 5, resp) == kio_frame(3, version, 5, resp)


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("error_code", [0, 35])
def test_api_versions(version: int, error_code: int) -> None:
    body = {"error_code": error_code, "throttle_time": 0,
            "api_keys": [{"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
                         for h in sorted(discover().values(), key=lambda h: h.api_key)]}
    resp = build(wire.response_class(18, version), body)
    assert wire.encode_response(18, version, 1, resp) == kio_frame(18, version, 1, resp)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_small_produce(version: int) -> None:
    body = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 0,
         "record_errors": [{"batch_index": 1, "batch_index_error_message": "bad"}], "error_message": None}]}]}
    resp = build(wire.response_class(0, version), body)
    assert wire.encode_response(0, version, 9, resp) == kio_frame(0, version, 9, resp)


def test_long_lengths_take_multibyte_varints() -> None:
    assert fastwrite.uvarint(0) == b"\0"
    assert fastwrite.uvarint(127) == b"\x7f"
    assert fastwrite.uvarint(128) == b"\x80\x01"
    assert fastwrite.uvarint(300) == b"\xac\x02"
    assert fastwrite.uvarint(2**31 - 1) == b"\xff\xff\xff\xff\x07"
    with pytest.raises(ValueError):
        fastwrite.uvarint(-1)
