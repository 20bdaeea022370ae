"""Compacted topics take only records with a key, as in Kafka: a produce batch holding a keyless
record fails its partition with INVALID_RECORD (87), the keyless records' batch-relative indexes in
record_errors (Produce v8+), and nothing of that partition's request is appended."""

from __future__ import annotations

import struct
import time
from typing import Any

import cramjam
import crc32c
import pytest
from helpers import RawConnection, confluent_produce, create_topics, ms, request_class

from strom.records import batch as rb
from strom.records import codec

pytestmark = pytest.mark.timeout(90)

INVALID_RECORD = 87
CORRUPT_MESSAGE = 2
CODECS = {"none": codec.NONE, "gzip": codec.GZIP, "snappy": codec.SNAPPY, "lz4": codec.LZ4, "zstd": codec.ZSTD}


def _batch(keys: list[bytes | None], codec_id: int = codec.NONE, value_size: int = 20) -> bytes:
    recs = [(k, b"v%d-" % i + b"x" * value_size) for i, k in enumerate(keys)]
    return codec.build_batch(recs, timestamp_ms=int(time.time() * 1000), codec=codec_id)


def _keys(n: int, keyless: set[int]) -> list[bytes | None]:
    return [None if i in keyless else b"key-%d" % i for i in range(n)]


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, rb.CRC, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES:])))
    return bytes(batch)


def _xerial(payload: bytes, block: int = 1000) -> bytes:
    """Java's snappy framing (xerial SnappyOutputStream), as the Java producer writes it."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(payload), block):
        c = bytes(cramjam.snappy.compress_raw(payload[i : i + block]))
        out += struct.pack(">i", len(c)) + c
    return bytes(out)


def _with_payload(batch: bytes, payload: bytes, codec_id: int) -> bytes:
    """``batch`` (uncompressed) with its records replaced by ``payload`` and the codec bits set."""
    b = bytearray(batch[: rb.HEADER_SIZE] + payload)
    struct.pack_into(">i", b, rb.BATCH_LENGTH, len(b) - rb.LOG_OVERHEAD)
    struct.pack_into(">h", b, rb.ATTRIBUTES, codec_id)
    return _recrc(b)


def _assert_refused(p: Any, version: int, indexes: list[int], topic: str) -> None:
    assert int(p.error_code) == INVALID_RECORD, p
    assert p.base_offset == -1
    if version >= 8:
        assert [e.batch_index for e in p.record_errors] == indexes
        for e in p.record_errors:
            assert e.batch_index_error_message == (
                f"Compacted topic cannot accept a record without a key in topic partition {topic}-0.")
        assert p.error_message and "without a key" in p.error_message


def _assert_empty(raw: RawConnection, topic: str, end: int = 0) -> None:
    assert raw.log_end_offset(topic, 0) == end
    f = raw.fetch(topic, 0, end)
    assert int(f.error_code) == 0 and f.high_watermark == end and not f.records


# ---- the record walk, without a broker ------------------------------------------------------------


@pytest.mark.parametrize("name", list(CODECS))
def test_null_key_indexes_every_codec(name: str) -> None:
    keys = _keys(300, {0, 17, 299})
    keys[5] = b""  # an empty key is a key
    b = _batch(keys, CODECS[name])
    (h,) = rb.iter_batches(b)
    assert codec.null_key_indexes(b, h, 1 << 20) == [0, 17, 299]
    assert codec.null_key_indexes(b, h, 1 << 20, limit=2) == [0, 17]
    keyed = _batch(_keys(50, set()), CODECS[name])
    assert codec.null_key_indexes(keyed, rb.iter_batches(keyed)[0], 1 << 20) == []
    # Inside a bigger buffer (the batch's position is honoured).
    buf = _batch(_keys(3, set())) + b
    h2 = rb.iter_batches(buf)[1]
    assert codec.null_key_indexes(memoryview(buf), h2, 1 << 20) == [0, 17, 299]


def test_null_key_indexes_xerial_snappy() -> None:
    plain = _batch(_keys(400, {3, 333}))
    b = _with_payload(plain, _xerial(plain[rb.HEADER_SIZE :]), codec.SNAPPY)
    (h,) = rb.iter_batches(b)
    assert codec.null_key_indexes(b, h, 1 << 20) == [3, 333]
    assert [r.key for r in codec.iter_records(b, h)] == _keys(400, {3, 333})


def test_null_key_indexes_bad_records() -> None:
    good = _batch(_keys(5, {2}))
    # More records announced than present; fewer; a record length past the end; garbage.
    more = bytearray(good)
    struct.pack_into(">i", more, rb.RECORDS_COUNT, 6)
    fewer = bytearray(good)
    struct.pack_into(">i", fewer, rb.RECORDS_COUNT, 4)
    long_rec = bytearray(good)
    long_rec[rb.HEADER_SIZE] = 0  # first record's length: 0, shorter than its fields
    cut_xerial = _with_payload(good, _xerial(good[rb.HEADER_SIZE :])[:-3], codec.SNAPPY)
    for bad in (_recrc(more), _recrc(fewer), _recrc(long_rec), _with_payload(good, b"\xff" * 40, codec.NONE),
                _with_payload(good, b"not zstd at all", codec.ZSTD), _with_payload(good, b"\x00", codec.GZIP),
                cut_xerial, _with_payload(good, b"x", 5)):
        (h,) = rb.iter_batches(bad)
        with pytest.raises(rb.InvalidRecordBatch):
            codec.null_key_indexes(bad, h, 1 << 20)


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_null_key_indexes_decompressed_size_is_capped(name: str) -> None:
    b = codec.build_batch([(b"k", b"\0" * 4_000_000)], codec=CODECS[name])
    (h,) = rb.iter_batches(b)
    with pytest.raises(rb.InvalidRecordBatch):
        codec.null_key_indexes(b, h, 1 << 20)
    assert codec.null_key_indexes(b, h, 8 << 20) == []


@pytest.mark.parametrize("name", list(CODECS))
def test_records_are_read_a_chunk_at_a_time_every_codec(name: str) -> None:
    """iter_records, iter_timestamps and the cleaner's parse_records read records across the
    decompressor's chunks (a 200 KB value spans several), and all stop at max_size."""
    from strom.records.filter import parse_records

    recs = [(b"key-%d" % i, (b"v%d-" % i) * (50_000 if i == 7 else i % 5), [("h", b"x")] if i % 3 else [])
            for i in range(300)]
    b = codec.build_batch(recs, timestamp_ms=1000, timestamps=[1000 + i for i in range(300)], codec=CODECS[name])
    (h,) = rb.iter_batches(b)
    got = list(codec.iter_records(b, h))
    assert [(r.key, r.value, list(r.headers)) for r in got] == recs
    assert list(codec.iter_timestamps(b, h)) == [(i, 1000 + i) for i in range(300)]
    assert [(r.key, r.value) for r in parse_records(b, h)] == [(k, v) for k, v, _ in recs]
    size = sum(len(v) for _, v, _ in recs)
    for read in (lambda: list(codec.iter_records(b, h, size // 2)), lambda: list(codec.iter_timestamps(b, h, size // 2)),
                 lambda: parse_records(b, h, size // 2)):
        if CODECS[name] == codec.NONE:
            read()  # nothing to inflate: the batch's own bytes
        else:
            with pytest.raises(rb.InvalidRecordBatch):
                read()


# ---- over the wire ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CODECS))
def test_keyless_record_refused_on_compacted_topic(module_broker: Any, name: str) -> None:
    topic = f"ck-refused-{name}"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "compact"}).error_code) == 0
        keyless = _batch(_keys(40, {7, 31}), CODECS[name])
        for version in (3, 7, 8, 9, 11):
            _assert_refused(raw.produce(topic, 0, keyless, version=version), version, [7, 31], topic)
        _assert_empty(raw, topic)
        # Keyed records (tombstones and empty keys included) are taken.
        keys = _keys(40, set())
        keys[3] = b""
        keyed = codec.build_batch([(k, None if i == 5 else b"v") for i, k in enumerate(keys)],
                                  timestamp_ms=int(time.time() * 1000), codec=CODECS[name])
        p = raw.produce(topic, 0, keyed)
        assert int(p.error_code) == 0 and p.base_offset == 0 and not p.record_errors, p
        # Still refused after that, and the log stays at what was taken.
        _assert_refused(raw.produce(topic, 0, keyless), 9, [7, 31], topic)
        _assert_empty(raw, topic, 40)
        recs = raw.fetch_records(topic, 0)
        assert [r.key for r in recs] == keys and recs[5].value is None


@pytest.mark.parametrize("name", list(CODECS))
def test_keyless_record_taken_on_delete_topic(module_broker: Any, name: str) -> None:
    topic = f"ck-delete-{name}"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "delete"}).error_code) == 0
        keys = _keys(40, {7, 31})
        p = raw.produce(topic, 0, _batch(keys, CODECS[name]))
        assert int(p.error_code) == 0 and p.base_offset == 0 and not p.record_errors, p
        assert [r.key for r in raw.fetch_records(topic, 0)] == keys


def test_compact_delete_policy_refuses_too(module_broker: Any) -> None:
    topic = "ck-compact-delete"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "compact,delete"}).error_code) == 0
        _assert_refused(raw.produce(topic, 0, _batch(_keys(3, {1}), codec.LZ4)), 9, [1], topic)
        _assert_empty(raw, topic)
        assert int(raw.produce(topic, 0, _batch(_keys(3, set()), codec.LZ4)).error_code) == 0
        assert raw.log_end_offset(topic, 0) == 3


def test_large_in_place_request(module_broker: Any) -> None:
    """A frame read in place (over the connection's read buffer) is refused or taken just the same."""
    topic = "ck-large"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "compact"}).error_code) == 0
        big = _batch(_keys(2000, {1999}), value_size=200)
        assert len(big) > 256 * 1024
        _assert_refused(raw.produce(topic, 0, big), 9, [1999], topic)
        _assert_empty(raw, topic)
        p = raw.produce(topic, 0, _batch(_keys(2000, set()), value_size=200))
        assert int(p.error_code) == 0 and p.base_offset == 0
        assert raw.log_end_offset(topic, 0) == 2000


def _produce_many(raw: RawConnection, parts: list[tuple[str, int, bytes]], version: int = 9) -> dict[tuple[str, int], Any]:
    req = request_class("produce", version, "ProduceRequest")
    tpd = request_class("produce", version, "TopicProduceData")
    ppd = request_class("produce", version, "PartitionProduceData")
    topics: dict[str, list[Any]] = {}
    for topic, partition, records in parts:
        topics.setdefault(topic, []).append(ppd(index=partition, records=records))
    body = req(transactional_id=None, acks=-1, timeout=ms(10000),
               topic_data=tuple(tpd(name=t, partition_data=tuple(ps)) for t, ps in topics.items()))
    resp = raw.request(0, version, body)
    return {(t.name, p.index): p for t in resp.responses for p in t.partition_responses}


def test_only_the_offending_partition_fails(module_broker: Any) -> None:
    """Several batches for one partition: indexes are relative to the failing batch and none is
    appended; the other partitions of the request are appended as usual."""
    topic, other = "ck-multi", "ck-multi-delete"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 2, {"cleanup.policy": "compact"}).error_code) == 0
        assert int(raw.create_topic(other, 1).error_code) == 0
        two_batches = _batch(_keys(4, set())) + _batch(_keys(6, {2, 5}), codec.ZSTD)
        out = _produce_many(raw, [(topic, 0, two_batches), (topic, 1, _batch(_keys(3, set()))),
                                  (other, 0, _batch(_keys(3, {0})))])
        refused = out[(topic, 0)]
        assert int(refused.error_code) == INVALID_RECORD
        assert [e.batch_index for e in refused.record_errors] == [2, 5]
        assert int(out[(topic, 1)].error_code) == 0 and int(out[(other, 0)].error_code) == 0
        _assert_empty(raw, topic)
        assert raw.log_end_offset(topic, 1) == 3 and raw.log_end_offset(other, 0) == 3


def test_record_errors_are_capped(module_broker: Any) -> None:
    topic = "ck-all-keyless"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "compact"}).error_code) == 0
        p = raw.produce(topic, 0, _batch([None] * 5000, codec.GZIP, value_size=1))
        assert int(p.error_code) == INVALID_RECORD
        assert [e.batch_index for e in p.record_errors] == list(range(1000))
        assert "1000 or more" in p.error_message
        _assert_empty(raw, topic)


def test_malformed_records_on_compacted_topic(module_broker: Any) -> None:
    """Records that do not fill their batch (CRC valid) are CORRUPT_MESSAGE there; the broker stays up."""
    topic = "ck-malformed"
    with RawConnection(module_broker.bootstrap) as raw:
        assert int(raw.create_topic(topic, 1, {"cleanup.policy": "compact"}).error_code) == 0
        good = _batch(_keys(5, set()))
        fewer = bytearray(good)
        struct.pack_into(">i", fewer, rb.RECORDS_COUNT, 4)
        for bad in (_recrc(fewer), _with_payload(good, b"\xff" * 30, codec.NONE),
                    _with_payload(good, b"garbage", codec.GZIP)):
            p = raw.produce(topic, 0, bad)
            assert int(p.error_code) == CORRUPT_MESSAGE, p
        _assert_empty(raw, topic)
        assert int(raw.produce(topic, 0, good).error_code) == 0


def test_compression_bomb_refused(broker_factory: Any) -> None:
    """A compressed batch inflating past codec.max_inflated_size (64 times max.message.bytes) is
    refused, not inflated."""
    b = broker_factory()
    with RawConnection(b.bootstrap) as raw:
        assert int(raw.create_topic("ck-bomb", 1, {"cleanup.policy": "compact"}).error_code) == 0
        bomb = codec.build_batch([(b"k", bytes(codec.max_inflated_size() + 1))], codec=codec.ZSTD)
        assert len(bomb) < 64 * 1024
        p = raw.produce("ck-bomb", 0, bomb)
        assert int(p.error_code) == CORRUPT_MESSAGE, p
        _assert_empty(raw, "ck-bomb")
        assert int(raw.produce("ck-bomb", 0, _batch(_keys(3, set()), codec.ZSTD)).error_code) == 0


def test_policy_switched_to_compact(module_broker: Any) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    from helpers import confluent_admin, wait_until

    topic = "ck-switched"
    bs = module_broker.bootstrap
    create_topics(bs, {topic: 1})
    with RawConnection(bs) as raw:
        assert int(raw.produce(topic, 0, _batch(_keys(3, {0}))).error_code) == 0
        entry = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        admin = confluent_admin(bs)  # kept: the futures fail if the client is collected
        futures = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[entry])])
        for f in futures.values():
            f.result(timeout=15)
        wait_until(lambda: int(raw.produce(topic, 0, _batch(_keys(3, {0}))).error_code) == INVALID_RECORD,
                   15, what="the compact policy to apply")
        assert raw.log_end_offset(topic, 0) >= 3


def test_confluent_producer(module_broker: Any) -> None:
    """librdkafka fails the keyless message with INVALID_RECORD; keyed ones are delivered."""
    from confluent_kafka import KafkaError, Producer

    bs = module_broker.bootstrap
    topic = "ck-confluent"
    create_topics(bs, {topic: 1}, {"cleanup.policy": "compact"})
    for compression in ("none", "zstd"):
        conf = {"bootstrap.servers": bs, "linger.ms": 0, "message.timeout.ms": 15000,
                "compression.type": compression}
        producer = Producer(conf)
        reports: list[tuple[Any, Any]] = []

        def cb(err: Any, msg: Any, reports: list[tuple[Any, Any]] = reports) -> None:
            reports.append((err, msg))

        producer.produce(topic, key=b"a", value=b"1", on_delivery=cb)
        assert producer.flush(20) == 0
        producer.produce(topic, value=b"no key", on_delivery=cb)
        assert producer.flush(20) == 0
        producer.produce(topic, key=b"b", value=b"2", on_delivery=cb)
        assert producer.flush(20) == 0
        assert len(reports) == 3
        assert reports[0][0] is None and reports[2][0] is None
        err = reports[1][0]
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    delivered = confluent_produce(bs, topic, [{"key": b"k%d" % i, "value": b"v"} for i in range(20)],
                                  {"compression.type": "lz4", "linger.ms": 20, "enable.idempotence": True})
    assert [d.offset for d in delivered] == list(range(4, 24))
