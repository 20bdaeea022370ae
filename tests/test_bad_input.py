"""Bad input from the network against a live broker: every abuse gets an error response or a closed
connection, the broker stays up with bounded memory, the log is never corrupted, and a well-behaved
client on other connections keeps producing and consuming throughout."""

from __future__ import annotations

import random
import socket
import struct
import time
import zlib
from collections.abc import Iterator

import pytest
from brokerproc import BrokerProcess
from helpers import (
    BackgroundTraffic,
    ConnectionClosed,
    RawConnection,
    confluent_produce,
    ms,
    request_class,
    values_batch,
    wait_until,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataV1Topic

from strom.protocol import wire
from strom.records import batch as rb
from strom.records import codec

MAX_MESSAGE_BYTES = 100_000
RSS_LIMIT = 300 * 1024 * 1024

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


class Abused:
    def __init__(self, broker: BrokerProcess, traffic: BackgroundTraffic) -> None:
        self.broker = broker
        self.traffic = traffic
        self.bootstrap = broker.bootstrap
        host, port = broker.bootstrap.rsplit(":", 1)
        self.addr = (host, int(port))

    def connect(self, timeout: float = 10.0) -> RawConnection:
        return RawConnection(self.bootstrap, timeout=timeout)

    def assert_healthy(self) -> None:
        assert self.broker.alive(), "broker died:\n" + self.broker.log_text()[-3000:]
        with self.connect() as c:
            assert int(c.api_versions().error_code) == 0
        assert self.broker.rss_bytes() < RSS_LIMIT, f"broker RSS {self.broker.rss_bytes() >> 20} MiB"


@pytest.fixture(scope="module")
def abused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Abused]:
    b = BrokerProcess(tmp_path_factory.mktemp("bad-input") / "data",
                      overrides={"message.max.bytes": str(MAX_MESSAGE_BYTES), "num.partitions": "2"}).start()
    try:
        with RawConnection(b.bootstrap) as c:
            for t, n in (("steady", 1), ("victim", 2), ("fuzz", 2)):
                assert int(c.create_topic(t, n).error_code) == 0
        traffic = BackgroundTraffic(b.bootstrap, "steady").start()
        wait_until(lambda: len(traffic.consumed) >= 5, 30, what="background traffic flowing")
        yield Abused(b, traffic)
        traffic.finish(5)
    finally:
        b.stop()


def frame(api_key: int, version: int, corr: int, body: bytes, client_id: bytes | None = b"abuser",
          flexible_header: bool = False) -> bytes:
    header = struct.pack(">hhi", api_key, version, corr)
    header += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    if flexible_header:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def error_or_close(conn: RawConnection, corr: int) -> bytes | None:
    """The broker must answer (with this correlation id) or close; a hang fails the test (socket timeout)."""
    try:
        data = conn.read_frame()
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
        return None
    (got,) = struct.unpack_from(">i", data, 0)
    assert got == corr, f"response correlation id {got}, expected {corr}"
    return data


def send_and_expect_close(abused: Abused, data: bytes, half_close: bool = True, timeout: float = 10.0) -> None:
    """Send bytes on a fresh connection; the broker must close it (after our EOF if ``half_close``)."""
    with abused.connect(timeout) as c:
        try:
            c.send_bytes(data)
            if half_close:
                c.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return
        assert c.wait_closed(timeout), f"broker kept the connection open after {data[:40]!r}..."


def legacy_message_set(magic: int) -> bytes:
    """One message in the pre-0.11 format (magic 0 or 1), with a valid CRC-32."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", int(time.time() * 1000))
    body += struct.pack(">i", -1)  # null key
    body += struct.pack(">i", 5) + b"hello"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


# ---------------------------------------------------------------------------------------------- framing


def test_random_bytes(abused: Abused) -> None:
    rng = random.Random(42)
    for i in range(30):
        blob = rng.randbytes(rng.choice([1, 3, 4, 5, 11, 64, 1000, 5000]))
        if i % 3 == 0:
            # Plausible size prefix, random inside.
            blob = struct.pack(">i", len(blob)) + blob
        send_and_expect_close(abused, blob)
    abused.assert_healthy()


def test_truncated_frames(abused: Abused) -> None:
    mdreq = request_class("metadata", 12, "MetadataRequest")(topics=None, allow_auto_topic_creation=False,
                                                              include_topic_authorized_operations=False)
    frames = [
        wire.encode_request(3, 12, 1, "t", mdreq),
        wire.encode_request(3, 1, 1, "t", MetadataV1(topics=(MetadataV1Topic(name="victim"),))),
        wire.encode_request(18, 3, 1, "t", request_class("api_versions", 3, "ApiVersionsRequest")(
            client_software_name="x", client_software_version="1")),
    ]
    for f in frames:
        for cut in sorted({1, 3, 4, 5, 9, 12, len(f) // 2, len(f) - 1}):
            # Frame cut short, then EOF: the broker must drop the connection.
            send_and_expect_close(abused, f[:cut])
        # The size prefix claims less than the request needs: a complete frame that cannot be decoded.
        short = struct.pack(">i", len(f) - 4 - 3) + f[4:-3]
        with abused.connect() as c:
            c.send_bytes(short)
            error_or_close(c, 1)
    abused.assert_healthy()


@pytest.mark.parametrize("size", [2**31 - 1, 2**31, 2**32 - 1, 100 * 1024 * 1024 + 1, 0, 1, 7])
def test_bad_length_prefix(abused: Abused, size: int) -> None:
    rss_before = abused.broker.rss_bytes()
    # No EOF from us: the broker must close on the prefix alone (no waiting for 2 GiB that never comes).
    send_and_expect_close(abused, struct.pack(">I", size) + (b"\x00" * size if size < 8 else b""), half_close=False)
    assert abused.broker.rss_bytes() < rss_before + 50 * 1024 * 1024
    abused.assert_healthy()


def test_large_partial_frame_is_bounded(abused: Abused) -> None:
    # A frame under the cap that never completes: buffered, then freed when the peer goes away.
    claimed = 90 * 1024 * 1024
    with abused.connect() as c:
        c.send_bytes(struct.pack(">i", claimed) + struct.pack(">hhi", 3, 1, 1))
        chunk = b"\x00" * (1 << 20)
        for _ in range(30):
            c.send_bytes(chunk)
    abused.assert_healthy()


def test_many_idle_connections(abused: Abused) -> None:
    socks = [socket.create_connection(abused.addr, timeout=10) for _ in range(200)]
    try:
        for i, s in enumerate(socks[:50]):
            s.sendall(struct.pack(">i", 100) + bytes([i]) * 10)  # partial frames left hanging
        abused.assert_healthy()
    finally:
        for s in socks:
            s.close()
    abused.assert_healthy()


def test_pipelined_flood_answers_in_order(abused: Abused) -> None:
    req = request_class("api_versions", 3, "ApiVersionsRequest")(client_software_name="x", client_software_version="1")
    with abused.connect(timeout=30) as c:
        n = 2000
        c.send_bytes(b"".join(wire.encode_request(18, 3, i, "flood", req) for i in range(n)))
        for i in range(n):
            got, body = wire.decode_response(18, 3, c.read_frame())
            assert got == i
            assert int(body.error_code) == 0
    abused.assert_healthy()


# ---------------------------------------------------------------------------------------------- API level


@pytest.mark.parametrize("api_key,version", [(999, 0), (-1, 0), (32767, 3), (-32768, 0), (0, 2), (0, 99),
                                             (1, 3), (1, 999), (3, 99), (19, 99)])
def test_unknown_api_keys_and_versions(abused: Abused, api_key: int, version: int) -> None:
    with abused.connect() as c:
        c.send_bytes(frame(api_key, version, 77, b"\x00" * 20))
        data = error_or_close(c, 77)
        assert data is None, "unknown API key / unsupported version should close the connection"
    abused.assert_healthy()


def test_api_versions_fallback(abused: Abused) -> None:
    with abused.connect() as c:
        for bad in (5, 99, 32767):
            c.send_bytes(frame(18, bad, 500 + bad, b"\x00\x00\x00", flexible_header=True))
            corr, body = wire.decode_response(18, 0, c.read_frame())
            assert corr == 500 + bad
            assert int(body.error_code) == UNSUPPORTED_VERSION
            ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
            assert ranges[18][0] == 0 and ranges[18][1] >= 3
        # The same connection then works at a supported version, as librdkafka retries.
        resp = c.api_versions(3)
        assert int(resp.error_code) == 0
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    # Old versions that librdkafka < 2.11.1 (Debian's kcat) looks for are inside the advertised ranges.
    for key, needed in {0: (3, 7), 1: (4, 10), 2: (1,), 3: (4,), 22: (0,), 18: (0, 3)}.items():
        lo, hi = ranges[key]
        assert all(lo <= v <= hi for v in needed), (key, ranges[key])


def _metadata_v1_absurd(count: int, trailing: bytes = b"") -> bytes:
    return frame(3, 1, 9, struct.pack(">i", count) + trailing)


@pytest.mark.parametrize("case", [
    "metadata_v1_max_topics", "metadata_v1_max_topics_with_data", "metadata_v1_negative", "metadata_v9_compact",
    "produce_topics", "produce_records_len", "string_len", "fetch_partitions", "create_topics_count",
])
def test_absurd_lengths(abused: Abused, case: str) -> None:
    int_max = 2**31 - 1
    data = {
        "metadata_v1_max_topics": lambda: _metadata_v1_absurd(int_max),
        "metadata_v1_max_topics_with_data": lambda: _metadata_v1_absurd(int_max, struct.pack(">h", 3) + b"abc" * 30000),
        "metadata_v1_negative": lambda: _metadata_v1_absurd(-7),
        # Flexible: compact array length as a varint of 2^31, header v2.
        "metadata_v9_compact": lambda: frame(3, 9, 9, b"\x80\x80\x80\x80\x08" + b"\x00" * 8, flexible_header=True),
        # Produce v3: transactional id null, acks, timeout, topic array count.
        "produce_topics": lambda: frame(0, 3, 9, struct.pack(">hhii", -1, 1, 1000, int_max)),
        "produce_records_len": lambda: frame(0, 3, 9, struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 6)
                                             + b"victim" + struct.pack(">iii", 1, 0, int_max) + b"\x00" * 100),
        "string_len": lambda: frame(3, 1, 9, struct.pack(">ih", 1, 32767) + b"x" * 10),
        "fetch_partitions": lambda: frame(1, 4, 9, struct.pack(">iiiibi", -1, 100, 1, 1000, 0, 1)
                                          + struct.pack(">h", 6) + b"victim" + struct.pack(">i", int_max)),
        "create_topics_count": lambda: frame(19, 2, 9, struct.pack(">i", int_max) + b"\x00" * 64),
    }[case]()
    rss_before = abused.broker.rss_bytes()
    with abused.connect() as c:
        c.send_bytes(data)
        reply = error_or_close(c, 9)
        if reply is not None:
            # Answered instead of closed: then the connection must stay sane for the next request.
            assert int(c.api_versions().error_code) == 0
    assert abused.broker.rss_bytes() < rss_before + 50 * 1024 * 1024
    abused.assert_healthy()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_huge_compact_lengths_do_not_kill_the_broker(broker) -> None:
    """Flexible versions encode array lengths as unsigned varints; values near and above 2^32 must be refused
    before anything is allocated for them (on its own broker: a failure here must not take the others down)."""
    for n in (2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**35 - 1):
        length = _uvarint(n)
        frames = [
            frame(3, 9, 1, length + b"\x00" * 8, flexible_header=True),  # Metadata v9 topics
            frame(0, 9, 2, b"\x00" + struct.pack(">hi", 1, 1000) + length + b"\x00" * 8, flexible_header=True),  # Produce
            frame(18, 3, 3, length + b"x" * 8, flexible_header=True),  # ApiVersions v3 client software name
        ]
        for data in frames:
            api_key = struct.unpack_from(">h", data, 4)[0]
            with RawConnection(broker.bootstrap) as c:
                c.send_bytes(data)
                error_or_close(c, struct.unpack_from(">i", data, 8)[0])
            try:
                with RawConnection(broker.bootstrap) as c:
                    c.api_versions()
            except OSError:
                time.sleep(0.5)
                pytest.fail(f"broker died on a compact length of {n} in api_key={api_key} (exit code "
                            f"{broker.proc.poll() if broker.proc else None}): "
                            + " | ".join(line for line in broker.log_lines if "alloc" in line or "panic" in line)[:500])
    with RawConnection(broker.bootstrap) as c:
        assert int(c.api_versions().error_code) == 0
    assert broker.rss_bytes() < RSS_LIMIT


def test_corrupt_batches_are_refused_and_log_unchanged(abused: Abused) -> None:
    with abused.connect() as c:
        good = values_batch([b"good-1", b"good-2"])
        r = c.produce("victim", 0, good)
        assert int(r.error_code) == NONE
        leo = c.log_end_offset("victim", 0)
        before = [(x.offset, x.value) for x in c.fetch_records("victim", 0)]

        flipped = bytearray(values_batch([b"will be corrupted"]))
        flipped[-2] ^= 0x01
        bad_crc = bytearray(values_batch([b"bad crc field"]))
        bad_crc[rb.CRC] ^= 0xFF
        long_len = bytearray(values_batch([b"length says more"]))
        struct.pack_into(">i", long_len, rb.BATCH_LENGTH, len(long_len) + 100)
        short_len = bytearray(values_batch([b"length says less"]))
        struct.pack_into(">i", short_len, rb.BATCH_LENGTH, 20)
        bad_magic = bytearray(values_batch([b"magic 3"]))
        bad_magic[rb.MAGIC] = 3
        second_bad = values_batch([b"ok first"]) + bytes(flipped)
        for name, records in [("flipped byte", flipped), ("crc field", bad_crc), ("length too long", long_len),
                              ("length too short", short_len), ("magic 3", bad_magic),
                              ("second batch bad", second_bad), ("truncated", values_batch([b"x" * 50])[:-10]),
                              ("header only", values_batch([b"y"])[:rb.HEADER_SIZE - 1])]:
            resp = c.produce("victim", 0, bytes(records))
            assert int(resp.error_code) == CORRUPT_MESSAGE, (name, resp)
        assert c.log_end_offset("victim", 0) == leo
        assert [(x.offset, x.value) for x in c.fetch_records("victim", 0)] == before
    abused.assert_healthy()


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported_for_message_format(abused: Abused, magic: int) -> None:
    with abused.connect() as c:
        leo = c.log_end_offset("victim", 1)
        resp = c.produce("victim", 1, legacy_message_set(magic))
        assert int(resp.error_code) == UNSUPPORTED_FOR_MESSAGE_FORMAT
        assert c.log_end_offset("victim", 1) == leo
    abused.assert_healthy()


def test_create_topics_bad_names(abused: Abused) -> None:
    with abused.connect() as c:
        bad = ["", ".", "..", "a/b", "with space", "x" * 250, "caf\u00e9", "tab\t", "../../etc"]
        for name in bad:
            result = c.create_topic(name, 1)
            assert int(result.error_code) == INVALID_TOPIC_EXCEPTION, (name, result)
        names = {t.name for t in c.metadata(None).topics}
        assert {"steady", "victim", "fuzz"} <= names and not names & set(bad)
        # Other refusals with Kafka's codes.
        assert int(c.create_topic("ok-name", 0).error_code) == 37  # INVALID_PARTITIONS
        assert int(c.create_topic("victim", 1).error_code) == 36  # TOPIC_ALREADY_EXISTS
        assert int(c.create_topic("bad-config", 1, {"cleanup.policy": "shred"}).error_code) == 40  # INVALID_CONFIG
        assert int(c.create_topic("bad-config", 1, {"no.such.config": "1"}).error_code) == 40
    assert not any(p.name.startswith(("bad-config", "ok-name")) for p in abused.broker.data_dir.iterdir())


def test_produce_to_unknown_topic_or_partition(abused: Abused) -> None:
    with abused.connect() as c:
        for topic, partition in [("victim", 2), ("victim", 7), ("victim", -1), ("no-such-topic", 0)]:
            resp = c.produce(topic, partition, values_batch([b"lost"]))
            assert int(resp.error_code) == UNKNOWN_TOPIC_OR_PARTITION, (topic, partition)
        # Produce does not auto-create topics.
        md = c.metadata(["no-such-topic"])
        assert int(md.topics[0].error_code) == UNKNOWN_TOPIC_OR_PARTITION
    abused.assert_healthy()


def test_message_too_large(abused: Abused) -> None:
    with abused.connect() as c:
        leo = c.log_end_offset("victim", 0)
        resp = c.produce("victim", 0, values_batch([b"z" * (MAX_MESSAGE_BYTES + 1000)]))
        assert int(resp.error_code) == MESSAGE_TOO_LARGE
        # Just under the limit is fine.
        resp = c.produce("victim", 0, values_batch([b"z" * (MAX_MESSAGE_BYTES - 200)]))
        assert int(resp.error_code) == NONE
        assert c.log_end_offset("victim", 0) == leo + 1
    # Through a real client: the delivery report carries MSG_SIZE_TOO_LARGE.
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    p = Producer({"bootstrap.servers": abused.bootstrap, "message.timeout.ms": 10000, "retries": 0})
    p.produce("victim", value=b"q" * (MAX_MESSAGE_BYTES + 5000), partition=1, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(15) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    abused.assert_healthy()


def test_fetch_out_of_range(abused: Abused) -> None:
    with abused.connect() as c:
        c.produce("victim", 1, values_batch([b"some"]))
        leo = c.log_end_offset("victim", 1)
        for offset in (leo + 1, leo + 1000, 2**62, -5):
            p = c.fetch("victim", 1, offset)
            assert int(p.error_code) == OFFSET_OUT_OF_RANGE, offset
            assert not p.records
        # At the log end: no error, nothing to read.
        p = c.fetch("victim", 1, leo)
        assert int(p.error_code) == NONE and not p.records and p.high_watermark == leo
        # Unknown partition in a fetch.
        assert int(c.fetch("victim", 9, 0).error_code) == UNKNOWN_TOPIC_OR_PARTITION
    abused.assert_healthy()


def test_idempotent_duplicates_and_gaps(abused: Abused) -> None:
    with abused.connect() as c:
        assert int(c.create_topic("idem", 1).error_code) == 0
        pid, epoch = c.init_producer_id()

        def batch(seq: int, n: int, tag: str) -> bytes:
            return values_batch([f"{tag}-{i}".encode() for i in range(n)], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq)

        batches = [batch(0, 3, "b0"), batch(3, 2, "b1"), batch(5, 4, "b2"), batch(9, 1, "b3"), batch(10, 2, "b4")]
        offsets = []
        for b in batches:
            r = c.produce("idem", 0, b)
            assert int(r.error_code) == NONE
            offsets.append(r.base_offset)
        assert offsets == [0, 3, 5, 9, 10]
        leo = c.log_end_offset("idem", 0)
        assert leo == 12
        # Retries of any of the last five batches: acknowledged with the original offset, not written again.
        for b, off in zip(batches, offsets, strict=True):
            r = c.produce("idem", 0, b)
            assert (int(r.error_code), r.base_offset) == (NONE, off)
        assert c.log_end_offset("idem", 0) == leo
        # A gap in the sequence, or a sequence from the past that is not a known batch: refused.
        for seq in (13, 100, 2**31 - 1):
            assert int(c.produce("idem", 0, batch(seq, 1, "gap")).error_code) == OUT_OF_ORDER_SEQUENCE_NUMBER, seq
        assert c.log_end_offset("idem", 0) == leo
        # The right next sequence still works.
        r = c.produce("idem", 0, batch(12, 1, "next"))
        assert (int(r.error_code), r.base_offset) == (NONE, 12)
        values = [x.value for x in c.fetch_records("idem", 0)]
        assert len(values) == 13 and len(set(values)) == 13
    abused.assert_healthy()


# ---------------------------------------------------------------------------------------------- fuzz

_SAFE_KEYS = [0, 1, 2, 3, 18, 22, 32]  # admin APIs that create or delete things are left out of the fuzz


def _templates() -> list[bytes]:
    md = request_class("metadata", 12, "MetadataRequest")(
        topics=(request_class("metadata", 12, "MetadataRequestTopic")(topic_id=None, name="fuzz"),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    prod_cls = request_class("produce", 9, "ProduceRequest")
    tpd = request_class("produce", 9, "TopicProduceData")
    ppd = request_class("produce", 9, "PartitionProduceData")
    batch = codec.build_batch([(b"k", b"v" * 30, [("h", b"1")])], timestamp_ms=1_700_000_000_000)
    prod = prod_cls(transactional_id=None, acks=1, timeout=ms(1000),
                    topic_data=(tpd(name="fuzz", partition_data=(ppd(index=0, records=batch),)),))
    fr = request_class("fetch", 12, "FetchRequest")
    ft = request_class("fetch", 12, "FetchTopic")
    fp = request_class("fetch", 12, "FetchPartition")
    fetch = fr(cluster_id=None, replica_id=-1, max_wait=ms(100), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1,
               topics=(ft(topic="fuzz", partitions=(fp(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                       last_fetched_epoch=-1, log_start_offset=-1,
                                                       partition_max_bytes=1 << 20),)),),
               forgotten_topics_data=(), rack_id="")
    lo = request_class("list_offsets", 7, "ListOffsetsRequest")
    lt = request_class("list_offsets", 7, "ListOffsetsTopic")
    lp = request_class("list_offsets", 7, "ListOffsetsPartition")
    lreq = lo(replica_id=-1, isolation_level=0,
              topics=(lt(name="fuzz", partitions=(lp(partition_index=1, current_leader_epoch=-1, timestamp=-2),)),))
    av = request_class("api_versions", 3, "ApiVersionsRequest")(client_software_name="fz", client_software_version="1")
    return [
        wire.encode_request(3, 12, 1, "fuzzer", md),
        wire.encode_request(0, 9, 1, "fuzzer", prod),
        wire.encode_request(1, 12, 1, "fuzzer", fetch),
        wire.encode_request(2, 7, 1, "fuzzer", lreq),
        wire.encode_request(18, 3, 1, "fuzzer", av),
    ]


TEMPLATES = _templates()


@st.composite
def fuzzed_frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random_body", "mutated", "mutated", "raw"]))
    if kind == "raw":
        return draw(st.binary(min_size=1, max_size=300))
    if kind == "random_body":
        key = draw(st.sampled_from(_SAFE_KEYS))
        version = draw(st.integers(min_value=-1, max_value=20))
        body = draw(st.binary(max_size=500))
        return frame(key, version, 1, body, flexible_header=draw(st.booleans()))
    data = bytearray(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not data:
            break
        pos = draw(st.integers(min_value=4, max_value=max(4, len(data) - 1))) if len(data) > 4 else 0
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif op == "set" and pos < len(data):
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(min_value=1, max_value=8))]
    if draw(st.booleans()) and len(data) >= 4:
        struct.pack_into(">i", data, 0, len(data) - 4)  # keep the size prefix consistent half of the time
    return bytes(data)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=fuzzed_frames())
def test_fuzzed_request_frames(abused: Abused, data: bytes) -> None:
    send_and_expect_close(abused, data, timeout=10)
    assert abused.broker.alive(), abused.broker.log_text()[-3000:]


def test_fuzz_left_the_broker_healthy(abused: Abused) -> None:
    abused.assert_healthy()
    with abused.connect() as c:
        # Whatever the fuzz appended to "fuzz" is a valid log.
        for p in (0, 1):
            recs = c.fetch_records("fuzz", p)
            assert [r.offset for r in recs] == list(range(len(recs)))


# ---------------------------------------------------------------------------------------------- at the end


def test_zz_well_behaved_client_kept_working(abused: Abused) -> None:
    abused.assert_healthy()
    acked, consumed, errors = abused.traffic.finish(30)
    assert not errors, errors[:5]
    assert len(acked) >= 20, "background producer made almost no progress"
    assert consumed == acked, f"consumed {len(consumed)} of {len(acked)} acknowledged records"
    # Once more after the background client: a fresh client still works.
    d = confluent_produce(abused.bootstrap, "steady", [{"value": b"final", "partition": 0}])
    assert d[0].offset == len(acked)
    assert abused.broker.rss_bytes() < RSS_LIMIT
