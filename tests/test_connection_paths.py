"""The connection's fast paths, over TCP: large requests read in place, fetch records spliced beside
the encoded response, handlers answered without a task, and response order kept throughout."""

from __future__ import annotations

import os
import struct
import threading
import time

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, ms, request_class

from strom.protocol import splice, wire
from strom.protocol.build import build
from strom.records import batch as rb
from strom.records import codec


def _big_batch(n: int, size: int, seed: int) -> bytes:
    return codec.build_batch([(None, bytes([seed % 256]) * 8 + os.urandom(size - 8)) for _ in range(n)],
                             timestamp_ms=int(time.time() * 1000))


def _metadata_body(version: int = 12) -> object:
    req = request_class("metadata", version, "MetadataRequest")
    return req(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_large_produce_sent_slowly_in_pieces_is_stored_whole(module_broker: BrokerProcess) -> None:
    """A 900 KB request (its own buffer, filled in place) dribbled in 4 parts, with a small request
    pipelined behind it: both answered, in order, and the records read back byte for byte."""
    batch = _big_batch(900, 1000, 1)
    assert len(batch) > wire.FrameDecoder.READ_BUFFER
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic("in-place", 1).error_code) == 0
        req = request_class("produce", 9, "ProduceRequest")
        tpd = request_class("produce", 9, "TopicProduceData")
        ppd = request_class("produce", 9, "PartitionProduceData")
        body = req(transactional_id=None, acks=1, timeout=ms(10000),
                   topic_data=(tpd(name="in-place", partition_data=(ppd(index=0, records=batch),)),))
        produce_frame = wire.encode_request(0, 9, 1, "t", body)
        meta_frame = wire.encode_request(3, 12, 2, "t", _metadata_body())
        stream = produce_frame + meta_frame
        cuts = [3, 70_000, len(produce_frame) - 10, len(stream)]
        pos = 0
        for cut in cuts:
            conn.send_bytes(stream[pos:cut])
            pos = cut
            time.sleep(0.05)
        corr, produced = wire.decode_response(0, 9, conn.read_frame())
        assert corr == 1
        assert int(produced.responses[0].partition_responses[0].error_code) == 0
        corr, _ = wire.decode_response(3, 12, conn.read_frame())
        assert corr == 2
        records = conn.fetch_records("in-place", 0)
        assert [r.value for r in records] == [r.value for r in codec.read_all(batch)]


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_of_large_batches_over_several_partitions(module_broker: BrokerProcess, version: int) -> None:
    """Spliced records (>= MIN_SPLICE) beside small inline ones, in every framing of the records field."""
    topic = f"spliced-{version}"
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic(topic, 3).error_code) == 0
        sent = {0: _big_batch(40, 1000, 0), 1: codec.build_batch([(b"k", b"small")], timestamp_ms=1),
                2: _big_batch(5, splice.MIN_SPLICE, 2)}
        for p, data in sent.items():
            assert int(conn.produce(topic, p, data).error_code) == 0
        meta = conn.request(3, 12, _metadata_body())
        topic_id = next(t.topic_id for t in meta.topics if t.name == topic)
        body = fetch_body(version, topic, range(3), topic_id=topic_id)
        resp = conn.request(1, version, body)
        got = {int(p.partition_index): bytes(p.records or b"") for p in resp.responses[0].partitions}
        for p, data in sent.items():
            # Stored batches differ from the sent ones only in the offset/epoch fields the broker sets.
            (header,) = rb.iter_batches(got[p])
            assert header.base_offset == 0 and got[p][16:] == data[16:]
            assert [r.value for r in codec.read_all(got[p])] == [r.value for r in codec.read_all(data)]


def fetch_body(version: int, topic: str, partitions: range | list[int], *, topic_id: object = None,
               max_wait_ms: int = 0, min_bytes: int = 0) -> object:
    """A Fetch request of any version (build() keeps the fields the version has)."""
    parts = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in partitions]
    return build(request_class("fetch", version, "FetchRequest"), {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 50 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "", "cluster_id": None,
        "forgotten_topics_data": [], "topics": [{"topic": topic, "topic_id": topic_id, "partitions": parts}]})


def test_long_poll_is_woken_and_keeps_response_order(module_broker: BrokerProcess) -> None:
    """A waiting fetch, then a metadata request on the same connection: the metadata answer waits for
    the fetch (order), and a produce from another connection wakes the fetch long before max_wait."""
    topic = "woken"
    with RawConnection(module_broker.bootstrap) as admin:
        assert int(admin.create_topic(topic, 1).error_code) == 0
    with RawConnection(module_broker.bootstrap, timeout=60) as conn:
        body = fetch_body(12, topic, [0], max_wait_ms=30_000, min_bytes=1)
        fetch_corr = conn.send(1, 12, body)
        meta_corr = conn.send(3, 12, _metadata_body())
        started = time.monotonic()

        def produce_later() -> None:
            time.sleep(0.5)
            with RawConnection(module_broker.bootstrap) as other:
                other.produce(topic, 0, codec.build_batch([(None, b"wake")], timestamp_ms=1), acks=1)

        t = threading.Thread(target=produce_later)
        t.start()
        corr, fetched = wire.decode_response(1, 12, conn.read_frame())
        waited = time.monotonic() - started
        t.join(10)
        assert corr == fetch_corr
        assert [r.value for r in codec.read_all(bytes(fetched.responses[0].partitions[0].records))] == [b"wake"]
        assert 0.4 < waited < 15, waited  # woken by the produce, not by max_wait (30 s)
        corr, _ = wire.decode_response(3, 12, conn.read_frame())
        assert corr == meta_corr


def test_frame_size_prefix_of_a_spliced_response_matches_its_bytes(module_broker: BrokerProcess) -> None:
    """Read a spliced Fetch response by hand: the size prefix must cover exactly the bytes sent."""
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic("sized", 1).error_code) == 0
        assert int(conn.produce("sized", 0, _big_batch(300, 1000, 3)).error_code) == 0
        body = fetch_body(12, "sized", [0])
        corr = conn.send(1, 12, body)
        ping = conn.send(18, 3, request_class("api_versions", 3, "ApiVersionsRequest")(
            client_software_name="t", client_software_version="1"))
        raw = b""
        deadline = time.monotonic() + 10
        while len(raw) < 4 or len(raw) < 4 + struct.unpack_from(">i", raw)[0] + 8:
            assert time.monotonic() < deadline
            raw += conn.sock.recv(1 << 20)
        (size,) = struct.unpack_from(">i", raw)
        got_corr, resp = wire.decode_response(1, 12, raw[4 : 4 + size])
        assert got_corr == corr and len(bytes(resp.responses[0].partitions[0].records)) > 300_000
        # The next frame starts right where the size said this one ends.
        assert struct.unpack_from(">i", raw, 4 + size + 4)[0] == ping


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_size_prefixes_alone_do_not_reserve_memory(broker: BrokerProcess) -> None:
    """50 connections each announce a 100 MB request and send 100 KB of it: the broker holds what
    arrived (about 1 MB each at most), not 5 GB, and keeps serving others."""
    assert broker.proc is not None
    before = _rss_mb(broker.proc.pid)
    conns = [RawConnection(broker.bootstrap, timeout=10) for _ in range(50)]
    try:
        for c in conns:
            c.send_bytes(struct.pack(">i", 100 << 20) + struct.pack(">hhi", 0, 9, 1) + b"\0" * 100_000)
        time.sleep(1.0)
        grown = _rss_mb(broker.proc.pid) - before
        assert grown < 200, f"RSS grew by {grown:.0f} MB"
        with RawConnection(broker.bootstrap) as other:
            assert other.request(3, 12, _metadata_body()) is not None
    finally:
        for c in conns:
            c.close()
