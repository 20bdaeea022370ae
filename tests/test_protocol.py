"""Sans-IO protocol layer: framing fed one byte at a time, header handling, response building."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from strom.protocol import wire
from strom.protocol.build import build


def test_frames_fed_one_byte_at_a_time() -> None:
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),), allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False)
    frame = wire.encode_request(3, 12, 42, "client-1", body)
    stream = frame * 3
    dec = wire.FrameDecoder(1 << 20)
    frames = []
    for i in range(len(stream)):
        frames += dec.feed(stream[i : i + 1])
    assert len(frames) == 3 and dec.buffered == 0
    prefix = wire.read_prefix(frames[0])
    assert (prefix.api_key, prefix.api_version, prefix.correlation_id) == (3, 12, 42)
    header, request = wire.decode_request(prefix, frames[1])
    assert header.client_id == "client-1"
    assert request.topics[0].name == "t"


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 100, 4000, 40_000, 130_000, 300_000, 1_000_000, 3_000_000]),
                      min_size=1, max_size=8),
       chunks=st.lists(st.integers(min_value=1, max_value=400_000), min_size=1, max_size=30))
def test_frames_of_any_size_survive_any_chunking(sizes: list[int], chunks: list[int]) -> None:
    """Small frames come from the shared read buffer, large ones from their own: both must arrive
    whole and in order whatever the socket's read sizes are."""
    payloads = [bytes([i % 251]) * 8 + bytes(range(256)) * (n // 256) + bytes(n % 256) for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    dec = wire.FrameDecoder(4_000_000)
    dec.LARGE_STEP = 200_000  # so that large frames' buffers grow several times
    frames: list[bytes | bytearray] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = chunks[i % len(chunks)]
        i += 1
        # Feed like the transport does: at most what get_buffer offers per read.
        with dec.get_buffer() as target:  # a transport releases the buffer after each read
            n = min(step, len(target), len(stream) - pos)
            target[:n] = stream[pos : pos + n]
        pos += n
        frames += dec.buffer_updated(n)
    assert [bytes(f) for f in frames] == payloads
    assert dec.buffered == 0
    # Large frames are handed on as the buffer they were read into (writable: offsets go in place).
    # (Between half and all of the read buffer, it depends on whether the frame came in one read.)
    half, whole = wire.FrameDecoder.READ_BUFFER // 2, wire.FrameDecoder.READ_BUFFER
    assert all(type(f) is bytes for f in frames if len(f) <= half)
    assert all(type(f) is bytearray for f in frames if len(f) > whole)


def test_client_id_is_classic_string_in_header_v2() -> None:
    frame = wire.encode_request(18, 3, 7, "abc", ApiVersionsRequest(client_software_name="x",
                                                                     client_software_version="1"))
    # size(4) api_key(2) version(2) correlation(4) then int16 length 3 and "abc"
    assert frame[12:14] == struct.pack(">h", 3) and frame[14:17] == b"abc"


def test_oversized_frame_is_refused() -> None:
    dec = wire.FrameDecoder(1000)
    with pytest.raises(wire.FrameTooLarge):
        dec.feed(struct.pack(">i", 2**31 - 1))
    with pytest.raises(wire.FrameTooLarge):
        wire.FrameDecoder(1000).feed(struct.pack(">i", -1))


def test_truncated_body_is_a_bad_request_but_trailing_bytes_are_tolerated() -> None:
    frame = wire.encode_request(18, 3, 1, None, ApiVersionsRequest(client_software_name="x",
                                                                    client_software_version="1"))
    payload = frame[4:]
    with pytest.raises(wire.BadRequest):
        wire.decode_request(wire.read_prefix(payload), payload[:-3])
    # Kafka ignores bytes after the body (librdkafka's all-topics Metadata v12 sends some).
    _, body = wire.decode_request(wire.read_prefix(payload), payload + b"\x01\x00\x00")
    assert body.client_software_name == "x"


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    cls = wire.response_class(18, 3)
    resp = build(cls, {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    data = wire.encode_response(18, 3, 99, resp)
    size, corr = struct.unpack_from(">ii", data)
    assert size == len(data) - 4 and corr == 99
    assert data[8:10] == b"\x00\x00"  # error code straight after the correlation id: no tag byte
    _, decoded = wire.decode_response(18, 3, data[4:])
    assert decoded.api_keys[0].max_version == 4


def test_build_fills_missing_fields_and_drops_unknown() -> None:
    cls = wire.response_class(3, 0)
    resp = build(cls, {"brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": "r"}], "topics": [],
                       "cluster_id": "ignored in v0"})
    assert resp.brokers[0].port == 9
    assert not hasattr(resp, "cluster_id")


def _all_request_frames() -> list[tuple[int, int, bytes]]:
    """One valid request frame per (api, version) the broker serves, from kio's defaults where possible."""
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from strom.records.codec import build_batch

    produce = ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=1), topic_data=(
        TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=build_batch([(b"k", b"v")])),)),))
    fetch = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1000, isolation_level=0,
                         topics=(FetchTopic(topic="t", partitions=(FetchPartition(partition=0, fetch_offset=0,
                                                                                  partition_max_bytes=100),)),))
    meta = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),), allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False)
    return [(0, 9, wire.encode_request(0, 9, 1, "c", produce)), (1, 4, wire.encode_request(1, 4, 2, "c", fetch)),
            (3, 12, wire.encode_request(3, 12, 3, "c", meta))]


def test_guard_accepts_valid_requests_and_rejects_every_truncation() -> None:
    for _api, _version, frame in _all_request_frames():
        payload = frame[4:]
        prefix = wire.read_prefix(payload)
        wire.decode_request(prefix, payload)
        for cut in range(10, len(payload)):
            with pytest.raises(wire.BadRequest):
                wire.decode_request(prefix, payload[:cut])


def test_guard_rejects_absurd_array_lengths_before_decoding() -> None:
    from strom.protocol.guard import BadLength, entity_skimmer

    # Metadata v12 body: compact array length 2^32-1 (i.e. 2^32-2 topics) in a 10-byte request.
    body = b"\xfe\xff\xff\xff\x0f" + b"\x00" * 5
    with pytest.raises(BadLength):
        entity_skimmer(MetadataRequest)(body, 0, [])
    # Metadata v1 (legacy int32 array length).
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1

    with pytest.raises(BadLength):
        entity_skimmer(MetadataRequestV1)(struct.pack(">i", 2**31 - 1) + b"\x00" * 8, 0, [])


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_produce_records_are_views_of_the_frame(version: int) -> None:
    """Produce records come back as views of the request frame, null ones as None, in wire order, and
    the rest of the request decodes as kio decodes the whole frame."""
    import importlib

    mod = importlib.import_module(f"kio.schema.produce.v{version}.request")
    blobs = [b"a" * 70, None, b"", b"c" * 5000]
    topics = (
        mod.TopicProduceData(name="t1", partition_data=(mod.PartitionProduceData(index=0, records=blobs[0]),
                                                        mod.PartitionProduceData(index=1, records=blobs[1]))),
        mod.TopicProduceData(name="t2", partition_data=(mod.PartitionProduceData(index=7, records=blobs[2]),
                                                        mod.PartitionProduceData(index=3, records=blobs[3]))),
    )
    body = mod.ProduceRequest(transactional_id="tx", acks=-1, timeout=datetime.timedelta(seconds=3),
                              topic_data=topics)
    payload = bytearray(wire.encode_request(0, version, 5, "c", body)[4:])
    header, got = wire.decode_request(wire.read_prefix(payload), payload)
    assert header.correlation_id == 5 and got.acks == -1 and got.transactional_id == "tx"
    parts = [pd for t in got.topic_data for pd in t.partition_data]
    assert [t.name for t in got.topic_data] == ["t1", "t2"] and [pd.index for pd in parts] == [0, 1, 7, 3]
    assert [None if pd.records is None else bytes(pd.records) for pd in parts] == blobs
    # Views of the frame itself: writing through one changes the frame (offsets are assigned in place).
    view = parts[3].records
    assert isinstance(view, memoryview) and not view.readonly
    view[0:1] = b"Z"
    assert b"Z" + b"c" * 4999 in payload
    # From immutable bytes the views are read-only.
    _, again = wire.decode_request(wire.read_prefix(bytes(payload)), bytes(payload))
    assert again.topic_data[0].partition_data[0].records.readonly


def test_a_size_prefix_alone_does_not_reserve_its_size() -> None:
    """Memory follows the bytes that arrived: a 100 MB claim followed by 10 bytes holds ~1 MB."""
    dec = wire.FrameDecoder(200 << 20)
    assert dec.feed(struct.pack(">i", 100 << 20) + b"x" * 10) == []
    with dec.get_buffer() as target:
        assert len(target) <= wire.FrameDecoder.LARGE_STEP


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_guard_walks_exactly_the_body_kio_reads(version: int) -> None:
    """The skimmer (fixed-size fields checked in runs, arrays of them at once) ends where kio's decoder
    ends, and every truncation of the body is caught before kio sees it."""
    from kio.serial import entity_reader

    from strom.protocol.guard import BadLength, entity_skimmer

    cls = wire._request_readers(1, version)[2]
    parts = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": p * 7, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in range(5)]
    body = build(cls, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                       "session_id": 0, "session_epoch": -1, "rack_id": "r", "cluster_id": None,
                       "forgotten_topics_data": [{"topic": "f", "topic_id": None, "partitions": [1, 2, 3]}],
                       "topics": [{"topic": "t", "topic_id": None, "partitions": parts}]})
    payload = wire.encode_request(1, version, 3, "c", body)[4:]
    header_size = wire._request_readers(1, version)[0](payload, 0)[1]
    _, body_size = entity_reader(cls)(payload, header_size)
    assert entity_skimmer(cls)(payload, header_size, []) == header_size + body_size
    for cut in range(header_size, len(payload)):
        with pytest.raises(BadLength):
            entity_skimmer(cls)(payload[:cut], header_size, [])
