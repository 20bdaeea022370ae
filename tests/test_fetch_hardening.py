"""Attacks on the fetch path, each refused the way Kafka refuses it, on a real broker with raw
protocol bytes or a real client: the answer carries Kafka's error code or stays within the broker's
bounds, and the broker keeps serving everyone else with nothing lost (docs/security.md, "What strom
defends against"). The cluster case is in tests/cluster/test_cluster_fetch_hardening.py."""

from __future__ import annotations

import base64
import dataclasses
import struct
import time
from typing import Any

import pytest
from helpers import (
    RawConnection,
    confluent_consume,
    confluent_produce,
    ms,
    request_class,
    values_batch,
    wait_until,
)
from test_cli_configs import ok
from txn_helpers import txn_producer

from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec

pytestmark = pytest.mark.timeout(120)

INT_MAX = 2**31 - 1


def fetch(conn: RawConnection, topic: str, offsets: dict[int, int], *, version: int = 12, replica_id: int = -1,
          max_bytes: int = INT_MAX, partition_max_bytes: int = INT_MAX, isolation_level: int = 0,
          leader_epoch: int = -1, min_bytes: int = 0, max_wait_ms: int = 0) -> Any:
    """One raw Fetch of ``topic`` (partition -> fetch offset); from v15 the replica id travels in
    ReplicaState, and from v13 the topic is named by its id."""
    def make(name: str, **fields: Any) -> Any:  # the fields this version has
        cls = request_class("fetch", version, name)
        return cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls)})

    parts = tuple(make("FetchPartition", partition=p, current_leader_epoch=leader_epoch, fetch_offset=offset,
                       last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                  for p, offset in offsets.items())
    named = {"topic_id": conn.topic_id(topic), "topic": None} if version >= 13 else {"topic": topic}
    state = make("ReplicaState", replica_id=replica_id, replica_epoch=-1) if version >= 15 else None
    body = make("FetchRequest", cluster_id=None, replica_id=replica_id, replica_state=state,
                max_wait=ms(max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=isolation_level, session_id=0, session_epoch=-1,
                topics=(make("FetchTopic", **named, partitions=parts),), forgotten_topics_data=(), rack_id="")
    return conn.request(1, version, body)


def partitions(response: Any) -> dict[int, Any]:
    (topic,) = response.responses
    return {int(p.partition_index): p for p in topic.partitions}


def batches(data: bytes | None) -> list[rb.BatchHeader]:
    return rb.iter_batches(bytes(data)) if data else []


def produce_batches(conn: RawConnection, topic: str, partition: int, count: int, records: int,
                    value_size: int, tag: str = "v") -> list[bytes]:
    """``count`` batches of ``records`` values each, in one Produce; returns the values in order."""
    values = [f"{tag}-{partition}-{i:06d}-".encode().ljust(value_size, b".") for i in range(count * records)]
    blob = b"".join(values_batch(values[i:i + records]) for i in range(0, len(values), records))
    assert int(conn.produce(topic, partition, blob).error_code) == 0
    return values


# ---- 1. a client naming a replica id is not a follower ---------------------------------------------


def test_a_client_naming_a_replica_id_is_not_served_as_a_follower(broker_factory: Any) -> None:
    """A consumer under a 1,000 B/s quota that names replica id 7 (or this broker's own id, or
    ReplicaState in Fetch v15+) used to be served as a follower: no quota, no READ_COMMITTED. One
    broker has no followers, so Kafka answers NOT_LEADER_OR_FOLLOWER (UNKNOWN_LEADER_EPOCH when the
    request carries the leader epoch) and reads nothing; consumers go on as before."""
    b = broker_factory(overrides={"quota.window.num": "3", "quota.window.size.seconds": "1"})
    bs = b.bootstrap
    with RawConnection(bs) as conn:
        for topic in ("orders", "pending"):
            assert int(conn.create_topic(topic, 1).error_code) == 0
        orders = produce_batches(conn, "orders", 0, count=100, records=10, value_size=200)  # ~200 KB
        committed = produce_batches(conn, "pending", 0, count=1, records=5, value_size=50, tag="done")
    # An open transaction on "pending": its records lie past the last stable offset.
    producer = txn_producer(bs, "holder")
    producer.begin_transaction()
    for i in range(5):
        producer.produce("pending", value=b"open-%d" % i, partition=0)
    assert producer.flush(20) == 0
    with RawConnection(bs) as conn:
        wait_until(lambda: conn.log_end_offset("pending", 0) == 10, what="the open transaction's records")
    ok("quotas", "alter", "--client-id", "capped", "--add-config", "consumer_byte_rate=1000",
       "--bootstrap-server", bs)
    one_batch = len(values_batch(orders[:10]))

    def capped_fetch(**kw: Any) -> Any:  # a new connection each time: a throttled one is left unread
        with RawConnection(bs, client_id="capped") as conn:
            return fetch(conn, kw.pop("topic", "orders"), {0: 0}, **kw)

    # The quota is in force: a consumer's fetch gets one window of it (KIP-74: one whole batch).
    normal = partitions(capped_fetch())[0]
    assert int(normal.error_code) == 0 and len(batches(normal.records)) == 1, normal
    assert len(bytes(normal.records)) == one_batch

    for version, epoch, expected in ((12, -1, E.not_leader_or_follower), (12, 0, E.unknown_leader_epoch),
                                     (4, -1, E.not_leader_or_follower), (16, -1, E.not_leader_or_follower)):
        for replica_id in (7, 0):  # 0: the broker's own id
            for topic, isolation in (("orders", 0), ("pending", 1)):
                p = partitions(capped_fetch(topic=topic, version=version, replica_id=replica_id, leader_epoch=epoch,
                                            isolation_level=isolation))[0]
                assert int(p.error_code) == expected, (version, replica_id, topic, p)
                assert not p.records and p.high_watermark == -1, (version, replica_id, topic, p)

    # Consumers are served as before: the capped one one batch at a time, READ_COMMITTED below the
    # open transaction, and another client everything.
    again = partitions(capped_fetch())[0]
    assert int(again.error_code) == 0 and bytes(again.records) == bytes(normal.records)
    with RawConnection(bs, client_id="reader") as conn:
        p = partitions(fetch(conn, "pending", {0: 0}, isolation_level=1))[0]
        assert int(p.error_code) == 0 and p.last_stable_offset == 5 and p.high_watermark == 10
        assert [h.last_offset for h in batches(p.records)] == [4]
        assert [r.value for r in conn.fetch_records("orders", 0)] == orders
        assert [r.value for r in conn.fetch_records("pending", 0)][:5] == committed
    producer.abort_transaction(20)
    assert b.alive()


# ---- 2. fetch.max.bytes bounds every response ------------------------------------------------------


def test_fetch_max_bytes_bounds_a_fetch_asking_for_everything(broker_factory: Any) -> None:
    """With fetch.max.bytes=1024 a fetch asking 2^31-1 bytes used to get every partition's data up to
    its partition_max_bytes (200 KB here). Now the response holds at most 1024 bytes, or one whole
    batch when the first batch is larger (KIP-74), and a real consumer still reads everything."""
    b = broker_factory(overrides={"fetch.max.bytes": "1024"})
    topic = "bounded"
    with RawConnection(b.bootstrap) as conn:
        assert int(conn.create_topic(topic, 2).error_code) == 0
        # Partition 0: 300 batches of 3 small records (~300 B each); partition 1: a 5 KB batch first.
        small = produce_batches(conn, topic, 0, count=300, records=3, value_size=60)
        big = produce_batches(conn, topic, 1, count=1, records=1, value_size=5000, tag="big")
        rest = produce_batches(conn, topic, 1, count=300, records=3, value_size=60)
        assert sum(len(v) for v in small + big + rest) > 100_000

        both = partitions(fetch(conn, topic, {0: 0, 1: 0}))
        sizes = {p: len(bytes(x.records or b"")) for p, x in both.items()}
        assert all(int(x.error_code) == 0 for x in both.values()), both
        assert 0 < sum(sizes.values()) <= 1024, sizes
        # The first batch goes out whole even when it alone is larger than fetch.max.bytes.
        (first,) = batches(partitions(fetch(conn, topic, {1: 0}))[1].records)
        assert first.records_count == 1 and first.size > 1024
        # Every response: within 1024 bytes or a single batch, however far into the log.
        for partition, offset in ((0, 0), (0, 450), (1, 1), (1, 600)):
            data = bytes(partitions(fetch(conn, topic, {partition: offset}))[partition].records or b"")
            assert data and (len(data) <= 1024 or len(batches(data)) == 1), (partition, offset, len(data))
        # A min_bytes beyond what may be sent is not waited for (it would wait out max_wait, a minute,
        # past this connection's 10 s read timeout).
        waited = partitions(fetch(conn, topic, {0: 0}, min_bytes=INT_MAX, max_wait_ms=60_000))[0]
        assert 0 < len(bytes(waited.records)) <= 1024

    got = confluent_consume(b.bootstrap, topic, [0, 1], len(small) + len(big) + len(rest), timeout=60)
    by_partition = {p: [m.value() for m in got if m.partition() == p] for p in (0, 1)}
    assert by_partition == {0: small, 1: big + rest}
    assert b.alive()


# ---- 3. a decompression bomb is read a chunk at a time ---------------------------------------------


def zstd_bomb(value_size: int, timestamp_ms: int) -> bytes:
    """One record batch of a few KB whose one record's value is ``value_size`` zero bytes, zstd
    compressed: a frame for the record's head, a 16 MiB frame of zeros as often as needed, and a
    frame for its (empty) headers, as one zstd stream."""
    import cramjam
    import crc32c

    head = bytearray([0])  # attributes
    for v in (0, 0, 1):  # timestamp delta, offset delta, key length
        codec._write_varint(head, v)
    head += b"k"
    codec._write_varint(head, value_size)
    record = bytearray()
    codec._write_varint(record, len(head) + value_size + 1)  # + the header count
    record += head
    piece = 16 << 20
    assert value_size % piece == 0
    zeros = bytes(cramjam.zstd.compress(bytes(piece)))
    payload = (bytes(cramjam.zstd.compress(bytes(record))) + zeros * (value_size // piece)
               + bytes(cramjam.zstd.compress(b"\x00")))
    batch = bytearray(codec.build_batch([(b"k", b"")], timestamp_ms=timestamp_ms)[: rb.HEADER_SIZE] + payload)
    struct.pack_into(">i", batch, rb.BATCH_LENGTH, len(batch) - rb.LOG_OVERHEAD)
    struct.pack_into(">h", batch, rb.ATTRIBUTES, codec.ZSTD)
    struct.pack_into(">I", batch, rb.CRC, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES:])))
    return bytes(batch)


def test_a_compression_bomb_is_never_decompressed_whole(broker_factory: Any) -> None:
    """An 8 KB zstd batch holding 256 MiB, then ListOffsets by timestamp: the broker used to
    decompress the whole batch (its peak memory grew by over 500 MB). It now reads the records a
    chunk at a time and stops at 64 times max.message.bytes, answering for that batch as a whole;
    the console's message view skips it; fetches serve it as stored. Memory stays put, the broker
    serves everyone, nothing else is lost."""
    from test_admin_api import call
    from test_metrics import admin_url

    b = broker_factory()
    topic = "bomb"
    now = int(time.time() * 1000)
    bomb = zstd_bomb(256 << 20, now - 2000)
    assert len(bomb) < 16 * 1024
    (bomb_header,) = rb.iter_batches(bomb)
    assert bomb_header.records_count == 1
    with RawConnection(b.bootstrap) as conn:
        assert int(conn.create_topic(topic, 1).error_code) == 0
        before = [b"a-%d" % i for i in range(3)]
        after = [b"c-%d" % i for i in range(3)]
        assert int(conn.produce(topic, 0, values_batch(before, timestamp_ms=now - 3000)).error_code) == 0
        assert int(conn.produce(topic, 0, bomb).error_code) == 0  # stored as it came
        assert int(conn.produce(topic, 0, values_batch(after, timestamp_ms=now - 1000)).error_code) == 0
        assert conn.list_offset(topic, 0, now - 3000) == (0, now - 3000)  # warm: an ordinary lookup
        rss = b.rss_bytes()
        b.reset_peak_rss()  # what passes through memory counts too, not only what stays

        for _ in range(3):
            assert conn.list_offset(topic, 0, now - 2500) == (3, now - 2000)  # the bomb's batch, whole
            assert conn.list_offset(topic, 0, now - 1000) == (4, now - 1000)  # past it, record by record
            p = partitions(fetch(conn, topic, {0: 0}))[0]
            assert int(p.error_code) == 0 and bytes(p.records).count(bomb[rb.ATTRIBUTES:]) == 1
        grown = b.peak_rss_bytes() - rss
        assert grown < 64 << 20, f"the broker's memory grew by {grown >> 20} MiB"
        status, view = call("GET", f"{admin_url(b)}/api/topics/{topic}/messages?partition=0&offset=0")
        assert status == 200
        shown = [base64.b64decode(r["value"]) for r in view["records"]]
        assert shown == before + after, [v[:10] for v in shown]
        grown = b.peak_rss_bytes() - rss
        assert grown < 64 << 20, f"the broker's memory grew by {grown >> 20} MiB"
        assert b.alive()
        assert [r.value for r in conn.fetch_records(topic, 0, 4)] == after
    # Another client is served.
    values = [{"value": b"later-%d" % i} for i in range(50)]
    confluent_produce(b.bootstrap, topic, values)
    got = confluent_consume(b.bootstrap, topic, [0], 53, start=4)
    assert [m.value() for m in got] == after + [v["value"] for v in values]
