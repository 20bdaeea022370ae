"""Fetch sessions (KIP-227) on a real broker: raw Fetch requests (kio) check the session semantics
Kafka's FetchManager has (create, incremental, forget, errors, close, eviction, cache slots), and
real clients that use sessions (kafka-python) or not (confluent-kafka) consume across many
partitions with appends to a few."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from helpers import RawConnection, confluent_consume, confluent_produce, ms, request_class, values_batch

from strom.protocol import wire
from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(120)


def _make(version: int, name: str, **fields: Any) -> Any:
    cls = request_class("fetch", version, name)
    return cls(**{f.name: fields.get(f.name) for f in dataclasses.fields(cls)})


def fetch_body(conn: RawConnection, session_id: int, epoch: int, topics: dict[str, dict[int, int]], *,
               version: int = 12, forgotten: dict[str, list[int]] | None = None, replica_id: int = -1,
               max_wait_ms: int = 0, min_bytes: int = 0) -> Any:
    """A Fetch of ``topics`` (name -> partition -> fetch offset) in session ``session_id`` at
    ``epoch``; from v13 topics are named by id."""
    def topic_fields(name: str) -> dict[str, Any]:
        return {"topic_id": conn.topic_id(name), "topic": None} if version >= 13 else {"topic": name}

    fetch_topics = tuple(
        _make(version, "FetchTopic", **topic_fields(name), partitions=tuple(
            _make(version, "FetchPartition", partition=p, current_leader_epoch=-1, fetch_offset=o,
                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            for p, o in parts.items()))
        for name, parts in topics.items())
    forgotten_topics = tuple(_make(version, "ForgottenTopic", **topic_fields(name), partitions=tuple(ps))
                             for name, ps in (forgotten or {}).items())
    state = _make(version, "ReplicaState", replica_id=replica_id, replica_epoch=-1) if version >= 15 else None
    return _make(version, "FetchRequest", cluster_id=None, replica_id=replica_id, replica_state=state,
                 max_wait=ms(max_wait_ms), min_bytes=min_bytes, max_bytes=1 << 24, isolation_level=0,
                 session_id=session_id, session_epoch=epoch, topics=fetch_topics,
                 forgotten_topics_data=forgotten_topics, rack_id="")


def fetch(conn: RawConnection, session_id: int, epoch: int, topics: dict[str, dict[int, int]] | None = None,
          version: int = 12, **kw: Any) -> Any:
    return conn.request(1, version, fetch_body(conn, session_id, epoch, topics or {}, version=version, **kw))


def answered(conn: RawConnection, response: Any) -> dict[tuple[str, int], Any]:
    """(topic, partition) -> partition data of a response (topic ids mapped back to names)."""
    out = {}
    for t in response.responses:
        name = t.topic if getattr(t, "topic", None) else conn.topic_name(t.topic_id)
        for p in t.partitions:
            out[(name, int(p.partition_index))] = p
    return out


def produce(conn: RawConnection, topic: str, partition: int, *values: bytes) -> None:
    assert int(conn.produce(topic, partition, values_batch(list(values))).error_code) == 0


@pytest.fixture
def conn(module_broker: Any) -> Any:
    c = RawConnection(module_broker.bootstrap)
    names: dict[Any, str] = {}

    def topic_name(topic_id: Any) -> str:
        if topic_id not in names:
            for t in c.metadata(None).topics:
                names[t.topic_id] = t.name
        return names[topic_id]

    c.topic_name = topic_name  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        c.close()


def new_topic(conn: RawConnection, name: str, partitions: int) -> str:
    assert int(conn.create_topic(name, partitions).error_code) == 0
    return name


@pytest.mark.parametrize("version", [12, 13])
def test_a_session_answers_only_what_changed(conn: Any, version: int) -> None:
    t = new_topic(conn, f"sess-basic-v{version}", 4)
    full = fetch(conn, 0, 0, {t: {p: 0 for p in range(4)}}, version=version)
    assert int(full.error_code) == 0
    sid = int(full.session_id)
    assert sid > 0
    assert set(answered(conn, full)) == {(t, p) for p in range(4)}  # a full response lists every partition

    idle = fetch(conn, sid, 1, version=version)
    assert int(idle.error_code) == 0 and int(idle.session_id) == sid
    assert answered(conn, idle) == {}  # nothing changed: no partition

    produce(conn, t, 2, b"a", b"b")
    got = answered(conn, fetch(conn, sid, 2, version=version))
    assert list(got) == [(t, 2)]
    assert int(got[(t, 2)].high_watermark) == 2 and got[(t, 2)].records

    # The records are still there at the offset the session has: told again until the offset moves.
    assert list(answered(conn, fetch(conn, sid, 3, version=version))) == [(t, 2)]
    assert answered(conn, fetch(conn, sid, 4, {t: {2: 2}}, version=version)) == {}
    assert answered(conn, fetch(conn, sid, 5, version=version)) == {}


def test_a_waiting_incremental_fetch_is_woken_by_an_append(conn: Any, module_broker: Any) -> None:
    t = new_topic(conn, "sess-wake", 50)
    sid = int(fetch(conn, 0, 0, {t: {p: 0 for p in range(50)}}).session_id)
    assert answered(conn, fetch(conn, sid, 1)) == {}
    started = time.monotonic()
    conn.send(1, 12, fetch_body(conn, sid, 2, {}, max_wait_ms=20_000, min_bytes=1))
    with RawConnection(module_broker.bootstrap) as other:
        produce(other, t, 17, b"x")
    _, response = wire.decode_response(1, 12, conn.read_frame())  # the socket's timeout is 10 s
    assert time.monotonic() - started < 10  # woken by the append, not by the end of max_wait
    got = {(t2.topic, int(p.partition_index)) for t2 in response.responses for p in t2.partitions}
    assert got == {(t, 17)}


def test_forgotten_partitions_and_new_ones(conn: Any) -> None:
    t = new_topic(conn, "sess-forget", 3)
    u = new_topic(conn, "sess-forget-other", 2)
    sid = int(fetch(conn, 0, 0, {t: {0: 0, 1: 0, 2: 0}}).session_id)
    # Forget partition 1; add the other topic's partition 0 (new to the session: answered once).
    got = answered(conn, fetch(conn, sid, 1, {u: {0: 0}}, forgotten={t: [1]}))
    assert list(got) == [(u, 0)]
    produce(conn, t, 1, b"forgotten")
    produce(conn, u, 0, b"kept")
    assert list(answered(conn, fetch(conn, sid, 2))) == [(u, 0)]
    # Forgetting everything ends the session: the answer has no session id.
    empty = fetch(conn, sid, 3, forgotten={t: [0, 2], u: [0]})
    assert int(empty.error_code) == 0 and int(empty.session_id) == 0
    assert int(fetch(conn, sid, 4).error_code) == E.fetch_session_id_not_found


def test_session_errors(conn: Any) -> None:
    t = new_topic(conn, "sess-errors", 2)
    sid = int(fetch(conn, 0, 0, {t: {0: 0, 1: 0}}).session_id)
    assert int(fetch(conn, sid, 5).error_code) == E.invalid_fetch_session_epoch
    assert int(fetch(conn, sid, 1).error_code) == 0  # the session is still there at its epoch
    unknown = sid + 1 if sid < 2**31 - 2 else 1
    assert int(fetch(conn, unknown, 1).error_code) == E.fetch_session_id_not_found
    # Names in the session, topic ids in the request (and the other way round).
    assert int(fetch(conn, sid, 2, version=13).error_code) == E.fetch_session_topic_id_error
    by_id = int(fetch(conn, 0, 0, {t: {0: 0}}, version=13).session_id)
    assert int(fetch(conn, by_id, 1, version=12).error_code) == E.fetch_session_topic_id_error


def test_epoch_minus_one_closes_the_session(conn: Any) -> None:
    t = new_topic(conn, "sess-close", 2)
    sid = int(fetch(conn, 0, 0, {t: {0: 0, 1: 0}}).session_id)
    closed = fetch(conn, sid, -1, {t: {0: 0, 1: 0}})
    assert int(closed.error_code) == 0 and int(closed.session_id) == 0
    assert set(answered(conn, closed)) == {(t, 0), (t, 1)}  # served as a sessionless full fetch
    assert int(fetch(conn, sid, 1).error_code) == E.fetch_session_id_not_found
    # A full fetch naming a session closes it and opens another.
    first = int(fetch(conn, 0, 0, {t: {0: 0}}).session_id)
    second = int(fetch(conn, first, 0, {t: {0: 0}}).session_id)
    assert second > 0 and second != first
    assert int(fetch(conn, first, 1).error_code) == E.fetch_session_id_not_found
    assert int(fetch(conn, second, 1).error_code) == 0


def test_no_sessions_with_zero_cache_slots_and_eviction_by_a_follower(broker_factory: Any) -> None:
    b = broker_factory(overrides={"max.incremental.fetch.session.cache.slots": "0"})
    with RawConnection(b.bootstrap) as c:
        assert int(c.create_topic("none", 1).error_code) == 0
        r = fetch(c, 0, 0, {"none": {0: 0}})
        assert int(r.error_code) == 0 and int(r.session_id) == 0
        assert set(answered(c, r)) == {("none", 0)}
    b = broker_factory(overrides={"max.incremental.fetch.session.cache.slots": "1"})
    with RawConnection(b.bootstrap) as c:
        assert int(c.create_topic("one", 1).error_code) == 0
        consumer = int(fetch(c, 0, 0, {"one": {0: 0}}).session_id)
        assert consumer > 0
        # Another consumer finds the only slot taken by a recent session: no session for it.
        assert int(fetch(c, 0, 0, {"one": {0: 0}}).session_id) == 0
        assert int(fetch(c, consumer, 1).error_code) == 0
        # A follower's (privileged) session evicts a consumer's.
        follower = fetch(c, 0, 0, {"one": {0: 0}}, replica_id=7)
        assert int(follower.session_id) > 0
        assert int(fetch(c, consumer, 2).error_code) == E.fetch_session_id_not_found


def test_kafka_python_consumes_through_a_session(module_broker: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    with RawConnection(module_broker.bootstrap) as c:
        new_topic(c, "sess-kp", 200)
    consumer = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=200)
    try:
        tps = [TopicPartition("sess-kp", p) for p in range(200)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        sent: dict[int, list[bytes]] = {}
        got: dict[int, list[bytes]] = {}
        for rnd in range(3):
            for p in (3, 77, 150 + rnd):
                values = [f"r{rnd}-p{p}-{i}".encode() for i in range(5)]
                sent.setdefault(p, []).extend(values)
                confluent_produce(module_broker.bootstrap, "sess-kp",
                                  [{"value": v, "partition": p} for v in values])
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < sum(map(len, sent.values())) and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=500).items():
                    got.setdefault(tp.partition, []).extend(r.value for r in records)
        assert got == sent
        handlers = consumer._fetcher._session_handlers
        assert handlers and all(h.next_metadata.session_id > 0 and h.next_metadata.epoch > 1
                                for h in handlers.values())
    finally:
        consumer.close()


def test_confluent_consumes_many_partitions_with_appends_to_a_few(module_broker: Any) -> None:
    with RawConnection(module_broker.bootstrap) as c:
        new_topic(c, "sess-ck", 300)
    records = [{"value": f"v{p}-{i}".encode(), "partition": p} for p in (0, 150, 299) for i in range(4)]
    confluent_produce(module_broker.bootstrap, "sess-ck", records)
    msgs = confluent_consume(module_broker.bootstrap, "sess-ck", range(300), len(records))
    by_partition: dict[int, list[bytes]] = {}
    for m in msgs:
        by_partition.setdefault(m.partition(), []).append(m.value())
    assert by_partition == {p: [f"v{p}-{i}".encode() for i in range(4)] for p in (0, 150, 299)}
