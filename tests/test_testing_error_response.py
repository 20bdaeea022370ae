"""strom.protocol.error_response: a whole-request error in the shape of each API's response.

Each response is encoded for the version and decoded back with kio, so what is checked is what a
client would read: every error code is the injected one and every topic/partition/group/key of the
request is answered.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema

from strom.broker.handlers import discover
from strom.protocol import wire
from strom.protocol.build import build
from strom.protocol.error_response import error_response
from strom.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

HANDLERS = discover()
CODE = ErrorCode.not_leader_or_follower
TOPIC_ID = uuid.UUID(int=0x1234)


def round_trip(api_key: int, version: int, request: dict[str, Any], code: ErrorCode = CODE) -> Any:
    req = build(load_request_schema(api_key, version), request)
    data = error_response(req, wire.response_class(api_key, version), code, "injected")
    frame = wire.encode_response_dict(api_key, version, 42, data)
    correlation_id, body = wire.decode_response(api_key, version, frame[4:])
    assert correlation_id == 42
    return body


def error_codes(entity: Any) -> list[ErrorCode]:
    """Every error_code in a decoded response, at any depth."""
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code":
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    found += error_codes(item)
        elif dataclasses.is_dataclass(value):
            found += error_codes(value)
    return found


def versions(name: str) -> list[int]:
    h = next(h for h in HANDLERS.values() if h.name == name)
    return list(range(h.min_version, h.max_version + 1))


@pytest.mark.parametrize("version", versions("produce"))
def test_produce_answers_every_partition(version: int) -> None:
    audit_id = uuid.uuid4()
    body = round_trip(0, version, {"acks": -1, "topic_data": [
        {"name": "orders", "topic_id": TOPIC_ID,
         "partition_data": [{"index": 0, "records": None}, {"index": 2, "records": None}]},
        {"name": "audit", "topic_id": audit_id, "partition_data": [{"index": 1, "records": None}]}]})
    got = [(t.topic_id if version >= 13 else t.name, p.index, p.error_code, p.base_offset)
           for t in body.responses for p in t.partition_responses]
    orders, audit = (TOPIC_ID, audit_id) if version >= 13 else ("orders", "audit")  # v13: topics by id
    assert got == [(orders, 0, CODE, -1), (orders, 2, CODE, -1), (audit, 1, CODE, -1)]


@pytest.mark.parametrize("version", versions("fetch"))
def test_fetch_answers_every_partition_and_the_top_level(version: int) -> None:
    topic = {"topic": "orders", "topic_id": TOPIC_ID, "partitions": [{"partition": 0}, {"partition": 3}]}
    body = round_trip(1, version, {"max_wait": 500, "topics": [topic],
                                   "forgotten_topics_data": [{"topic": "old", "topic_id": uuid.uuid4(),
                                                              "partitions": [9]}]})
    assert len(body.responses) == 1
    t = body.responses[0]
    assert (t.topic_id if version >= 13 else t.topic) == (TOPIC_ID if version >= 13 else "orders")
    assert [(p.partition_index, p.error_code, p.high_watermark, p.records) for p in t.partitions] == \
        [(0, CODE, -1, b""), (3, CODE, -1, b"")]
    if version >= 7:
        assert body.error_code == CODE


@pytest.mark.parametrize("version", versions("metadata"))
def test_metadata_answers_every_topic(version: int) -> None:
    body = round_trip(3, version, {"topics": [{"name": "orders"}, {"name": "audit"}]},
                      ErrorCode.leader_not_available)
    assert [(t.name, t.error_code) for t in body.topics] == \
        [("orders", ErrorCode.leader_not_available), ("audit", ErrorCode.leader_not_available)]
    assert body.brokers == ()


@pytest.mark.parametrize("version", versions("list_offsets"))
def test_list_offsets_answers_every_partition(version: int) -> None:
    body = round_trip(2, version, {"replica_id": -1, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 1, "timestamp": -2}]}]})
    p = body.topics[0].partitions[0]
    assert (body.topics[0].name, p.partition_index, p.error_code, p.offset) == ("orders", 1, CODE, -1)


@pytest.mark.parametrize("version", versions("offset_commit"))
def test_offset_commit_answers_every_partition(version: int) -> None:
    body = round_trip(8, version, {"group_id": "g", "member_id": "m", "topics": [
        {"name": "orders", "topic_id": TOPIC_ID, "partitions": [{"partition_index": 0, "committed_offset": 5},
                                                                {"partition_index": 1, "committed_offset": 7}]}]},
                      ErrorCode.coordinator_not_available)
    orders = TOPIC_ID if version >= 10 else "orders"  # v10: topics by id
    assert [(t.topic_id if version >= 10 else t.name, p.partition_index, p.error_code)
            for t in body.topics for p in t.partitions] == \
        [(orders, 0, ErrorCode.coordinator_not_available), (orders, 1, ErrorCode.coordinator_not_available)]


@pytest.mark.parametrize("version", versions("offset_fetch"))
def test_offset_fetch_answers_group_and_partitions(version: int) -> None:
    topics = [{"name": "orders", "topic_id": TOPIC_ID, "partition_indexes": [0, 1]}]
    request = {"groups": [{"group_id": "g", "topics": topics}]} if version >= 8 else \
        {"group_id": "g", "topics": topics}
    body = round_trip(9, version, request, ErrorCode.coordinator_not_available)
    if version >= 8:
        (group,) = body.groups
        assert (group.group_id, group.error_code) == ("g", ErrorCode.coordinator_not_available)
        topics_out = group.topics
    else:
        topics_out = body.topics
        if version >= 2:
            assert body.error_code == ErrorCode.coordinator_not_available
    orders = TOPIC_ID if version >= 10 else "orders"  # v10: topics by id
    assert [(t.topic_id if version >= 10 else t.name, p.partition_index, p.error_code, p.committed_offset)
            for t in topics_out for p in t.partitions] \
        == [(orders, i, ErrorCode.coordinator_not_available, -1) for i in (0, 1)]


@pytest.mark.parametrize("version", versions("find_coordinator"))
def test_find_coordinator_answers_every_key(version: int) -> None:
    request = {"key_type": 0, "coordinator_keys": ["g1", "g2"]} if version >= 4 else {"key": "g1"}
    body = round_trip(10, version, request, ErrorCode.coordinator_not_available)
    if version >= 4:
        assert [(c.key, c.error_code, c.node_id, c.port) for c in body.coordinators] == \
            [("g1", ErrorCode.coordinator_not_available, -1, -1), ("g2", ErrorCode.coordinator_not_available, -1, -1)]
    else:
        assert (body.error_code, body.node_id, body.port) == (ErrorCode.coordinator_not_available, -1, -1)


@pytest.mark.parametrize(("name", "api_key"), [("join_group", 11), ("heartbeat", 12), ("sync_group", 14)])
def test_group_membership_apis_answer_at_the_top_level(name: str, api_key: int) -> None:
    for version in versions(name):
        body = round_trip(api_key, version, {"group_id": "g", "member_id": "m", "generation_id": 3,
                                             "protocol_type": "consumer",
                                             "protocols": [{"name": "range", "metadata": b""}],
                                             "assignments": [{"member_id": "m", "assignment": b""}]},
                          ErrorCode.rebalance_in_progress)
        assert body.error_code == ErrorCode.rebalance_in_progress
        if name == "join_group":
            assert (body.generation_id, body.members) == (-1, ())  # the protocols are not members


def test_every_api_and_version_encodes_an_error_response() -> None:
    # Even from an empty request every response encodes, and says the error somewhere a client reads
    # it: the top-level code, or each element it answers (none here, so then there is nothing to say).
    checked = 0
    for key, handler in HANDLERS.items():
        for version in range(handler.min_version, handler.max_version + 1):
            body = round_trip(key, version, {}, ErrorCode.unknown_server_error)
            assert set(error_codes(body)) <= {ErrorCode.unknown_server_error}
            if any(f.name == "error_code" for f in dataclasses.fields(body)):
                assert body.error_code == ErrorCode.unknown_server_error
            checked += 1
    assert checked > 100
