"""A sessionless Fetch that repeats itself on a connection (librdkafka's: every assigned partition,
session 0, epoch -1, at every request) and finds nothing to send is answered with the bytes encoded
for the previous one while none of its partitions is notified (handlers/fetch.py ``_IdleAnswer``).

Those bytes must be exactly what the full path answers for the same state: each step below sends
the same request on a connection that keeps its idle answer (twice, so the second is a reuse
whenever the state allows it) and on a fresh connection (no earlier request: the full path), and
compares the two responses byte for byte (all but the correlation id), across appends to asked and
unasked partitions, high watermark and log start moves, offsets out of range, a deleted and
re-created topic, read_committed with an open transaction, and a long poll woken by an append.
The broker's ``strom_fetch_answers_reused`` counter shows the reuse happened where it should.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from helpers import RawConnection, confluent_admin, ms, request_class, values_batch, wait_until
from test_metrics import admin_url, delta, scrape

from strom.protocol import wire

pytestmark = pytest.mark.timeout(180)
REUSED = "strom_fetch_answers_reused_total"


def _make(version: int, name: str, **fields: Any) -> Any:
    cls = request_class("fetch", version, name)
    return cls(**{f.name: fields.get(f.name) for f in dataclasses.fields(cls)})


def sessionless(conn: RawConnection, version: int, offsets: dict[str, dict[int, int]], *, max_wait_ms: int = 0,
                isolation_level: int = 0, topic_ids: dict[str, Any]) -> Any:
    """librdkafka's kind of Fetch: session 0, epoch -1, every partition named."""
    def topic_fields(name: str) -> dict[str, Any]:
        return {"topic_id": topic_ids[name], "topic": None} if version >= 13 else {"topic": name}

    topics = tuple(
        _make(version, "FetchTopic", **topic_fields(name), partitions=tuple(
            _make(version, "FetchPartition", partition=p, current_leader_epoch=-1, fetch_offset=o,
                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            for p, o in parts.items()))
        for name, parts in offsets.items())
    state = _make(version, "ReplicaState", replica_id=-1, replica_epoch=-1) if version >= 15 else None
    return _make(version, "FetchRequest", cluster_id=None, replica_id=-1, replica_state=state,
                 max_wait=ms(max_wait_ms), min_bytes=1, max_bytes=1 << 24, isolation_level=isolation_level,
                 session_id=0, session_epoch=-1, topics=topics, forgotten_topics_data=(), rack_id="")


class Pair:
    """The connection that keeps its idle answer, and the full path's answer to compare with."""

    def __init__(self, bootstrap: str, url: str, version: int) -> None:
        self.bootstrap = bootstrap
        self.url = url
        self.version = version
        self.kept = RawConnection(bootstrap)
        self.topic_ids: dict[str, Any] = {}

    def ids(self) -> None:
        self.topic_ids = {t.name: t.topic_id for t in self.kept.metadata(None).topics}

    def frame(self, conn: RawConnection, body: Any) -> bytes:
        corr = conn.send(1, self.version, body)
        frame = conn.read_frame()
        assert wire.decode_response(1, self.version, frame)[0] == corr
        return frame[4:]  # without the correlation id

    def check(self, offsets: dict[str, dict[int, int]], reused: int, **kw: Any) -> Any:
        """Send the request twice on the keeping connection and once on a fresh one: the same bytes;
        ``reused`` of the two were answers sent again."""
        body = sessionless(self.kept, self.version, offsets, topic_ids=self.topic_ids, **kw)
        before = scrape(self.url)
        first = self.frame(self.kept, body)
        second = self.frame(self.kept, body)
        assert delta(before, scrape(self.url), REUSED) == reused
        with RawConnection(self.bootstrap) as fresh:
            full = self.frame(fresh, body)
        assert first == full and second == full
        return wire.decode_response(1, self.version, b"\0\0\0\0" + full)[1]


def parts(response: Any, pair: Pair) -> dict[tuple[str, int], Any]:
    names = {v: k for k, v in pair.topic_ids.items()}
    return {(t.topic if pair.version < 13 else names.get(t.topic_id, "?"), int(p.partition_index)): p
            for t in response.responses for p in t.partitions}


def produce(conn: RawConnection, topic: str, partition: int, *values: bytes) -> None:
    assert int(conn.produce(topic, partition, values_batch(list(values))).error_code) == 0


@pytest.fixture
def admin_broker(broker_factory: Any) -> Any:
    return broker_factory(overrides={"admin.listeners": "http://127.0.0.1:0"})


@pytest.mark.parametrize("version", [12, 16])
def test_the_reused_answer_is_the_full_paths_answer(admin_broker: Any, version: int) -> None:
    from confluent_kafka import TopicPartition

    url = admin_url(admin_broker)
    pair = Pair(admin_broker.bootstrap, url, version)
    conn = pair.kept
    for name, n in (("idle-a", 4), ("idle-b", 2)):
        assert int(conn.create_topic(name, n).error_code) == 0
    pair.ids()
    asked = {"idle-a": {0: 0, 1: 0, 2: 0}, "idle-b": {0: 0, 1: 0}}  # idle-a 3 is not asked for

    pair.check(asked, reused=1)  # nothing anywhere: the second is the first's bytes
    pair.check(asked, reused=2)  # still nothing: both reused

    produce(conn, "idle-a", 3, b"elsewhere")  # the same topic, a partition not asked for
    pair.check(asked, reused=2)

    produce(conn, "idle-b", 1, b"x", b"y")  # asked for: records for it, nothing reused
    got = parts(pair.check(asked, reused=0), pair)
    assert got[("idle-b", 1)].records and int(got[("idle-b", 1)].high_watermark) == 2

    caught_up = {"idle-a": {0: 0, 1: 0, 2: 0}, "idle-b": {0: 0, 1: 2}}
    pair.check(caught_up, reused=1)  # a new request: its first answer is the full path's

    admin = confluent_admin(admin_broker.bootstrap)  # the log start moves (DeleteRecords)
    for f in admin.delete_records([TopicPartition("idle-b", 1, 1)], request_timeout=20).values():
        f.result(20)
    got = parts(pair.check(caught_up, reused=1), pair)
    assert int(got[("idle-b", 1)].log_start_offset) == 1

    past_end = {"idle-a": {0: 5, 1: 0, 2: 0}, "idle-b": {0: 0, 1: 2}}  # OFFSET_OUT_OF_RANGE: never kept
    got = parts(pair.check(past_end, reused=0), pair)
    assert int(got[("idle-a", 0)].error_code) == 1
    pair.check(caught_up, reused=2)  # the answer kept before still holds: nothing changed since

    # librdkafka's rotation: the same partitions a step further along, idle-b's run cut in two.
    rotated = {"idle-b": {1: 2}, "idle-a": {0: 0, 1: 0, 2: 0}}
    pair.check(rotated, reused=2)
    body = sessionless(conn, version, {"idle-b": {1: 2}, "idle-a": {0: 0, 1: 0, 2: 0}},
                       topic_ids=pair.topic_ids)
    split = dataclasses.replace(body, topics=(*body.topics, dataclasses.replace(
        body.topics[0], partitions=(dataclasses.replace(body.topics[0].partitions[0], partition=0,
                                                        fetch_offset=0),))))
    before = scrape(url)
    with RawConnection(admin_broker.bootstrap) as fresh:
        assert pair.frame(conn, split) == pair.frame(fresh, split)
    assert delta(before, scrape(url), REUSED) == 1
    fewer = {"idle-a": {1: 0, 2: 0}}  # a run that is a part of a known one
    pair.check(fewer, reused=2)

    # A long poll on a kept answer, woken by an append to one of its partitions: the records.
    body = sessionless(conn, version, caught_up, topic_ids=pair.topic_ids, max_wait_ms=1500)
    assert pair.frame(conn, body) == pair.frame(conn, body)  # waited out: kept, then reused
    before = scrape(url)
    conn.send(1, version, body)
    time.sleep(0.3)  # most likely waiting by now (if not, it reads the appends at once: the same answer)
    with RawConnection(admin_broker.bootstrap) as other:
        produce(other, "idle-a", 3, b"not asked")  # wakes the wait, changes nothing it asked for
        produce(other, "idle-a", 2, b"z")
    woken = conn.read_frame()[4:]
    assert delta(before, scrape(url), REUSED) == 0
    with RawConnection(admin_broker.bootstrap) as fresh:
        assert woken == pair.frame(fresh, body)
    got = parts(wire.decode_response(1, version, b"\0\0\0\0" + woken)[1], pair)
    assert got[("idle-a", 2)].records

    # A long poll that runs out: the kept answer, as the full path's.
    moved = {"idle-a": {0: 0, 1: 0, 2: 1}, "idle-b": {0: 0, 1: 2}}
    pair.check(moved, reused=1)
    slow = sessionless(conn, version, moved, topic_ids=pair.topic_ids, max_wait_ms=300)
    before = scrape(url)
    assert pair.frame(conn, slow) == pair.frame(conn, slow)
    assert delta(before, scrape(url), REUSED) == 1

    # The topic deleted (errors: never kept), then made again (empty: kept again).
    for f in admin.delete_topics(["idle-b"], request_timeout=20).values():
        f.result(20)
    wait_until(lambda: "idle-b" not in {t.name for t in conn.metadata(None).topics}, 20, what="idle-b gone")
    got = parts(pair.check(moved, reused=0), pair)
    gone = [int(p.error_code) for k, p in got.items() if k[0] == "idle-b"]
    assert len(gone) == 2 and all(gone)
    assert int(conn.create_topic("idle-b", 2).error_code) == 0
    pair.ids()
    again = {"idle-a": {0: 0, 1: 0, 2: 1}, "idle-b": {0: 0, 1: 0}}
    pair.check(again, reused=1)


def test_read_committed_with_an_open_transaction(admin_broker: Any) -> None:
    """The last stable offset holds a read_committed answer back; its move (the commit) is a change."""
    from confluent_kafka import Producer

    url = admin_url(admin_broker)
    pair = Pair(admin_broker.bootstrap, url, 12)
    conn = pair.kept
    assert int(conn.create_topic("idle-txn", 2).error_code) == 0
    asked = {"idle-txn": {0: 0, 1: 0}}
    pair.check(asked, reused=1, isolation_level=1)
    p = Producer({"bootstrap.servers": admin_broker.bootstrap, "transactional.id": "idle-txn"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce("idle-txn", b"v", partition=0)
    p.flush(20)
    # Open: nothing visible yet under read_committed; the answer tells the high watermark (changed).
    got = parts(pair.check(asked, reused=1, isolation_level=1), pair)
    assert int(got[("idle-txn", 0)].high_watermark) == 1 and int(got[("idle-txn", 0)].last_stable_offset) == 0
    assert not got[("idle-txn", 0)].records
    p.commit_transaction(20)
    got = parts(pair.check(asked, reused=0, isolation_level=1), pair)
    assert got[("idle-txn", 0)].records
