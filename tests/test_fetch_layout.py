"""protocol/fetch_layout.py without a broker: a Fetch request's layout read from kio's encoding at
every flexible version, the idle answer rebuilt for any rotation (librdkafka's order) exactly as
the encoder writes it, and no exception on any bytes."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from helpers import ms, request_class
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import fetch_layout, wire

VERSIONS = list(range(12, 19))


def _make(version: int, name: str, **fields: Any) -> Any:
    cls = request_class("fetch", version, name)
    return cls(**{f.name: fields.get(f.name) for f in dataclasses.fields(cls)
                  if f.name in fields or (f.default is dataclasses.MISSING
                                          and f.default_factory is dataclasses.MISSING)})


def request(version: int, items: list[tuple[str, int]], offsets: dict[tuple[str, int], int]) -> Any:
    """A sessionless Fetch of ``items`` (topic, partition) in this order, a topic entry per run."""
    runs: list[tuple[str, list[int]]] = []
    for topic, p in items:
        if runs and runs[-1][0] == topic:
            runs[-1][1].append(p)
        else:
            runs.append((topic, [p]))

    def key(topic: str) -> dict[str, Any]:
        return {"topic_id": uuid.uuid5(uuid.NAMESPACE_DNS, topic)} if version >= 13 else {"topic": topic}

    topics = tuple(_make(version, "FetchTopic", **key(t), partitions=tuple(
        _make(version, "FetchPartition", partition=p, current_leader_epoch=3, fetch_offset=offsets[(t, p)],
              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20) for p in ps))
        for t, ps in runs)
    state = _make(version, "ReplicaState", replica_id=-1, replica_epoch=-1) if version >= 15 else None
    return _make(version, "FetchRequest", cluster_id=None, replica_id=-1, replica_state=state, max_wait=ms(500),
                 min_bytes=1, max_bytes=1 << 24, isolation_level=0, session_id=0, session_epoch=-1, topics=topics,
                 forgotten_topics_data=(), rack_id="")


def frame_of(version: int, body: Any) -> tuple[bytes, int]:
    frame = wire.encode_request(1, version, 7, "rdkafka", body)[4:]
    _, start = wire.decode_header(wire.read_prefix(frame), frame)
    return frame, start


def idle_body(version: int, body: Any, hw: dict[tuple[str, int], int]) -> bytes:
    """What the full path encodes for ``body`` when no partition has anything to send."""
    def name(t: Any) -> str:
        return t.topic if version < 13 else next(n for n in ("a", "b", "c") if
                                                  uuid.uuid5(uuid.NAMESPACE_DNS, n) == t.topic_id)

    responses = [{("topic_id" if version >= 13 else "topic"): (t.topic_id if version >= 13 else t.topic),
                  "partitions": [{"partition_index": p.partition, "error_code": 0, "high_watermark": hw[(name(t), p.partition)],
                                  "last_stable_offset": hw[(name(t), p.partition)], "log_start_offset": 0,
                                  "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
                                 for p in t.partitions]} for t in body.topics]
    frame = wire.encode_response_dict(1, version, 0, {"throttle_time": 0, "error_code": 0, "session_id": 0,
                                                      "responses": responses})
    return frame[wire.response_header_size(1, version):]


@settings(max_examples=40, deadline=None)
@given(version=st.sampled_from(VERSIONS), sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       shift=st.integers(0, 30), data=st.data())
def test_any_rotation_gets_the_full_paths_answer(version: int, sizes: list[int], shift: int, data: Any) -> None:
    items = [(t, p) for t, n in zip("abc", sizes, strict=False) for p in range(n)]
    offsets = {k: data.draw(st.integers(0, 1 << 40)) for k in items}
    hw = {k: offsets[k] for k in items}
    first = request(version, items, offsets)
    layout = fetch_layout.parse_request(*frame_of(version, first), version)
    assert layout is not None
    learnt = fetch_layout.IdleAnswers.learn(layout, first.topics, idle_body(version, first, hw))
    assert learnt is not None
    k = shift % len(items)
    rotated = request(version, items[k:] + items[:k], offsets)
    again = fetch_layout.parse_request(*frame_of(version, rotated), version)
    assert again is not None
    assert learnt.answer(again) == idle_body(version, rotated, hw)
    # A partition at another offset, or one not learnt: not answered from what was learnt.
    moved = request(version, items, {**offsets, items[0]: offsets[items[0]] + 1})
    assert learnt.answer(fetch_layout.parse_request(*frame_of(version, moved), version)) is None  # type: ignore[arg-type]
    extra = request(version, [*items, ("c", 99)], {**offsets, ("c", 99): 0})
    assert learnt.answer(fetch_layout.parse_request(*frame_of(version, extra), version)) is None  # type: ignore[arg-type]


def test_a_different_fixed_field_is_not_the_same_request() -> None:
    items = [("a", 0), ("a", 1)]
    offsets = dict.fromkeys(items, 0)
    first = request(16, items, offsets)
    layout = fetch_layout.parse_request(*frame_of(16, first), 16)
    assert layout is not None
    learnt = fetch_layout.IdleAnswers.learn(layout, first.topics, idle_body(16, first, offsets))
    assert learnt is not None
    for change in ({"max_wait": ms(100)}, {"min_bytes": 2}, {"isolation_level": 1}, {"rack_id": "r1"}):
        other = fetch_layout.parse_request(*frame_of(16, dataclasses.replace(first, **change)), 16)
        assert other is not None and learnt.answer(other) is None


def test_old_versions_and_a_wrong_answer_are_not_learnt() -> None:
    items = [("a", 0)]
    first = request(12, items, {("a", 0): 0})
    frame, start = frame_of(12, first)
    assert fetch_layout.parse_request(frame, start, 11) is None
    layout = fetch_layout.parse_request(frame, start, 12)
    assert layout is not None
    good = idle_body(12, first, {("a", 0): 0})
    assert fetch_layout.IdleAnswers.learn(layout, first.topics, good[:-1] + b"\1") is None
    assert fetch_layout.IdleAnswers.learn(layout, first.topics, good + b"\0") is None


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), data=st.binary(max_size=300), cut=st.integers(0, 400))
def test_any_bytes_read_without_an_exception(version: int, data: bytes, cut: int) -> None:
    fetch_layout.parse_request(data, 0, version)
    items = [("a", 0), ("b", 1)]
    frame, start = frame_of(version, request(version, items, dict.fromkeys(items, 5)))
    fetch_layout.parse_request(frame[:cut], start, version)
    fetch_layout.parse_request(frame[:start] + data, start, version)
