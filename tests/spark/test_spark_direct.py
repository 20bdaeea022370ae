"""The direct reader (strom.spark.direct: Fetch requests decoded by compiled code) against a real broker:
its Arrow batches equal the consumer reader's (strom.spark.fetch) for the same ranges, on plain,
null, compressed, compacted and transactional data, with the same data-loss rules; and the kernel
itself under fuzzing. No Spark session: read_range is called as a Spark task calls it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from brokerproc import BrokerProcess
from helpers import wait_until
from spark_helpers import create_topic, produce

from strom.spark import decode, direct, fetch  # decode imports numba (a test dependency): no skipping
from strom.spark.options import OptionError, source_options
from strom.spark.planning import OffsetRange

pytestmark = pytest.mark.timeout(120)

# Compaction and retention in seconds, not hours (the values tests/test_compaction.py uses).
# Record timestamps: recent, or retention (checked every 500 ms here) deletes them at once.
NOW_MS = int(time.time() * 1000) - 3_600_000
FAST = {"log.cleaner.backoff.ms": "200", "log.retention.check.interval.ms": "500",
        "log.segment.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("direct") / "data", overrides=FAST).start()
    try:
        yield b
    finally:
        b.stop()


def _options(b: str, topic: str, **extra: str) -> Any:
    options = {"kafka.bootstrap.servers": b, "subscribe": topic, **extra}
    return source_options({k.lower(): v for k, v in options.items()}, streaming=False)  # as Spark hands them


def _both(b: str, topic: str, start: int, until: int, partition: int = 0, **extra: str) -> pa.Table:
    """The range read by both readers: the direct reader's table, checked equal to the consumer's."""
    opts = _options(b, topic, **extra)
    r = OffsetRange(topic, partition, start, until)
    schema = fetch.arrow_schema(opts.include_headers)
    direct_batches = list(direct.read_range(opts, r))
    assert all(0 < batch.num_rows <= fetch.BATCH_ROWS for batch in direct_batches)
    got = pa.Table.from_batches(direct_batches, schema)
    want = pa.Table.from_batches(list(fetch.read_range(opts, r)), schema)
    assert got.num_rows == want.num_rows
    for name in schema.names:  # column by column, so that a failure names the column
        assert got.column(name).combine_chunks().equals(want.column(name).combine_chunks()), name
    return got


def _headers(j: int) -> list[tuple[str, bytes | None]] | None:
    kind = j % 5
    if kind == 0:
        return None
    if kind == 1:
        return [("trace", f"t{j}".encode())]
    if kind == 2:
        return [("dup", b"1"), ("dup", b"2"), ("empty", b""), ("null", None)]
    if kind == 3:
        return [("", b"x" * (j % 50)), ("caf\u00e9", None)]
    return []


def _records(n: int, topic: str, seed: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        j = i + seed
        out.append({"topic": topic, "partition": 0,
                    "key": None if j % 7 == 0 else f"key-{j}".encode(),
                    "value": None if j % 11 == 0 else (b"" if j % 13 == 0 else bytes([j % 251]) * (j % 300)),
                    "timestamp": NOW_MS + j * 3, "headers": _headers(j)})
    return out


def test_plain_and_null_records_whole_and_mid_batch_ranges(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topic(b, "d-plain", 1)
    produce(b, _records(3000, "d-plain"), **{"linger.ms": 20, "batch.num.messages": 300})
    t = _both(b, "d-plain", 0, 3000)
    assert t.column("offset").to_pylist() == list(range(3000))
    assert t.column("key").null_count > 0 and t.column("value").null_count > 0
    _both(b, "d-plain", 17, 2951)      # both ends inside batches
    _both(b, "d-plain", 1234, 1235)    # one record
    t = _both(b, "d-plain", 17, 2951, includeHeaders="true")
    assert t.column("headers").null_count > 0 and [("dup", b"1"), ("dup", b"2"), ("empty", b""), ("null", None)] in [
        [(h["key"], h["value"]) for h in hs] for hs in t.column("headers").to_pylist() if hs]
    # LogAppendTime: every record carries its batch's max timestamp, type 1.
    create_topic(b, "d-append", 1, {"message.timestamp.type": "LogAppendTime"})
    produce(b, _records(500, "d-append"), **{"linger.ms": 20})
    t = _both(b, "d-append", 5, 500)
    assert set(t.column("timestampType").to_pylist()) == {1}


def test_small_batches_are_sliced_not_copied(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topic(b, "d-slices", 1)
    produce(b, _records(1000, "d-slices"), **{"linger.ms": 50})
    batches = list(direct.read_range(_options(b, "d-slices"), OffsetRange("d-slices", 0, 3, 1000), batch_rows=100))
    assert [x.num_rows for x in batches][:3] == [100, 100, 100]
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == list(range(3, 1000))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed(broker: BrokerProcess, codec: str) -> None:
    b = broker.bootstrap
    topic = f"d-{codec}"
    create_topic(b, topic, 1)
    produce(b, _records(2000, topic, seed=5), **{"compression.type": codec, "linger.ms": 20,
                                                 "batch.num.messages": 250})
    _both(b, topic, 0, 2000)
    _both(b, topic, 101, 1899, includeHeaders="true")


def test_compacted_topic_with_gaps(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topic(b, "d-compact", 1, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                     "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000",
                                     "segment.ms": "1000"})
    writes = [{"topic": "d-compact", "partition": 0, "key": b"k%02d" % (i % 20), "value": b"v%04d" % i}
              for i in range(600)]
    produce(b, writes[:300], **{"linger.ms": 10})
    produce(b, writes[300:], **{"linger.ms": 10, "compression.type": "lz4"})
    time.sleep(1.2)  # past segment.ms: the next record rolls the segment, the rest can be cleaned
    produce(b, [{"topic": "d-compact", "partition": 0, "key": b"end", "value": b"end"}])

    def compacted() -> bool:  # to the end: the latest of each key and the sentinel (the readers must
        opts = _options(b, "d-compact")  # not see the cleaner at work between them)
        return sum(x.num_rows for x in direct.read_range(opts, OffsetRange("d-compact", 0, 0, 601))) == 21

    wait_until(compacted, 40, interval=0.5, what="d-compact to be compacted")
    t = _both(b, "d-compact", 0, 601)
    assert t.column("value").to_pylist()[:20] == [b"v%04d" % i for i in range(580, 600)]
    assert t.column("offset").to_pylist()[-1] == 600
    _both(b, "d-compact", 3, 599)


def _transactions(b: str, topic: str) -> None:
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": b, "linger.ms": 5})
    txn = Producer({"bootstrap.servers": b, "transactional.id": f"{topic}-txn", "linger.ms": 5})
    txn.init_transactions(30)

    def plain_records(tag: str, n: int) -> None:
        for i in range(n):
            plain.produce(topic, key=f"{tag}-{i}".encode(), value=b"plain", partition=0)
        assert plain.flush(30) == 0

    def transaction(tag: str, n: int, commit: bool) -> None:
        txn.begin_transaction()
        for i in range(n):
            txn.produce(topic, key=f"{tag}-{i}".encode(), value=tag.encode(), partition=0)
            if i == n // 2:
                plain_records(f"{tag}-between", 5)  # interleaved with the transaction's records
        txn.flush(30)
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    plain_records("a", 50)
    transaction("committed", 40, True)
    plain_records("b", 20)
    transaction("aborted", 40, False)
    plain_records("c", 20)
    transaction("committed2", 30, True)
    plain_records("d", 10)


def test_transactions_both_isolation_levels(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topic(b, "d-txn", 1)
    _transactions(b, "d-txn")
    end = direct.PartitionClient(_options(b, "d-txn"), "d-txn", 0)
    try:
        _, high = end.watermarks()
    finally:
        end.close()
    uncommitted = _both(b, "d-txn", 0, high)
    committed = _both(b, "d-txn", 0, high, **{"kafka.isolation.level": "read_committed"})
    values = committed.column("value").to_pylist()
    assert b"aborted" not in values and values.count(b"committed") == 40 and values.count(b"committed2") == 30
    assert uncommitted.column("value").to_pylist().count(b"aborted") == 40
    assert uncommitted.num_rows == committed.num_rows + 40
    # Ranges starting inside the aborted transaction and ending inside the last one.
    offsets = uncommitted.column("offset").to_pylist()
    first_aborted = offsets[uncommitted.column("value").to_pylist().index(b"aborted")]
    _both(b, "d-txn", first_aborted + 3, high - 5, **{"kafka.isolation.level": "read_committed"})
    _both(b, "d-txn", first_aborted + 3, high - 5)


def test_data_loss_both_ways(broker: BrokerProcess) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b = broker.bootstrap
    create_topic(b, "d-lossy", 1)
    produce(b, [{"topic": "d-lossy", "value": f"v{i}".encode()} for i in range(100)])
    admin = AdminClient({"bootstrap.servers": b})
    for f in admin.delete_records([TopicPartition("d-lossy", 0, 60)]).values():
        assert f.result(timeout=30).low_watermark == 60
    r = OffsetRange("d-lossy", 0, 30, 120)
    with pytest.raises(fetch.DataLossError, match=r"Offsets \[30, 60\) of d-lossy-0 are gone"):
        list(direct.read_range(_options(b, "d-lossy"), r))
    # The range also ends past the log (100): the readers wait pollTimeoutMs for it, then go on.
    t0 = time.monotonic()
    t = _both(b, "d-lossy", 30, 120, failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "1000"})
    assert t.column("offset").to_pylist() == list(range(60, 100))
    assert time.monotonic() - t0 >= 2 * 1.0  # each reader waited for the end before calling it lost


@pytest.mark.parametrize("reader", ["direct", "consumer"])
def test_an_end_that_arrives_late_is_no_data_loss(broker: BrokerProcess, reader: str) -> None:
    """A range planned past where the log ends now (as after a leader change, while the new
    leader's high watermark has not yet reached the old one's) is read whole once the log gets
    there, without a data-loss failure."""
    import threading

    b, topic = broker.bootstrap, f"d-late-{reader}"
    create_topic(b, topic, 1)
    produce(b, [{"topic": topic, "value": f"v{i}".encode()} for i in range(50)])
    later = threading.Timer(1.0, produce, (b, [{"topic": topic, "value": f"v{i}".encode()} for i in range(50, 80)]))
    later.start()
    try:
        opts = _options(b, topic, **{"kafkaConsumer.pollTimeoutMs": "20000"})
        read = direct.read_range if reader == "direct" else fetch.read_range
        got = pa.Table.from_batches(list(read(opts, OffsetRange(topic, 0, 10, 80))),
                                    fetch.arrow_schema(opts.include_headers))
    finally:
        later.join(timeout=30)
    assert got.column("offset").to_pylist() == list(range(10, 80))
    assert got.column("value").to_pylist() == [f"v{i}".encode() for i in range(10, 80)]


def test_unknown_partition_times_out_like_the_consumer_reader(broker: BrokerProcess) -> None:
    opts = _options(broker.bootstrap, "d-nowhere", **{"kafkaConsumer.pollTimeoutMs": "1000"})
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no record of d-nowhere-0 at or after offset 0 within "
                                           r"kafkaConsumer.pollTimeoutMs=1000"):
        list(direct.read_range(opts, OffsetRange("d-nowhere", 0, 0, 10)))
    assert time.monotonic() - t0 < 10


def test_reader_option_and_fallbacks(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert direct.use_direct(_options(b, "t"))  # auto, numba here, nothing against it
    assert not direct.use_direct(_options(b, "t", reader="consumer"))
    assert direct.use_direct(_options(b, "t", reader="direct"))
    assert direct.use_direct(_options(b, "t", includeHeaders="true"))
    assert not direct.use_direct(_options(b, "t", arrow="false"))
    # A client option the direct reader does not honour: auto falls back, direct is refused.
    assert not direct.use_direct(_options(b, "t", **{"kafka.fetch.max.bytes": "1000"}))
    with pytest.raises(OptionError, match="'fetch.max.bytes'"):
        _options(b, "t", reader="direct", **{"kafka.fetch.max.bytes": "1000"})
    assert not direct.use_direct(_options(b, "t", **{"kafka.check.crcs": "true"}))
    assert direct.use_direct(_options(b, "t", **{"kafka.check.crcs": "false", "kafka.client.id": "me",
                                                 "kafka.isolation.level": "read_committed"}))
    with pytest.raises(OptionError, match="option 'reader'"):
        _options(b, "t", reader="fast")
    # The fallback really reads with the consumer reader.
    create_topic(b, "d-fallback", 1)
    produce(b, [{"topic": "d-fallback", "value": b"v", "headers": [("h", b"x")]}])
    calls: list[Any] = []

    def factory(conf: dict[str, Any]) -> Any:
        from confluent_kafka import Consumer

        calls.append(conf)
        return Consumer(conf)

    opts = _options(b, "d-fallback", includeHeaders="true", **{"kafka.fetch.wait.max.ms": "100"})
    original = fetch.read_range
    try:
        fetch.read_range = lambda o, r, **kw: original(o, r, consumer_factory=factory, **kw)  # type: ignore[assignment]
        (batch,) = direct.read_range_any(opts, OffsetRange("d-fallback", 0, 0, 1))
    finally:
        fetch.read_range = original  # type: ignore[assignment]
    assert calls and calls[0]["fetch.wait.max.ms"] == "100"
    assert batch.column("headers").to_pylist() == [[{"key": "h", "value": b"x"}]]


def test_end_of_partition_in_the_same_batch_as_records(broker: BrokerProcess) -> None:
    """librdkafka may hand the end-of-partition event in the same consume() batch as the last
    records (it did under load): the consumer reader reads the range whole."""
    from confluent_kafka import Consumer, KafkaError, Message

    b = broker.bootstrap
    create_topic(b, "d-eof", 1)
    produce(b, [{"topic": "d-eof", "value": f"v{i}".encode()} for i in range(5)])

    class EofWithRecords:
        def __init__(self, conf: dict[str, Any]) -> None:
            self.consumer = Consumer(conf)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.consumer, name)

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
            msgs = self.consumer.consume(num_messages, timeout)
            if msgs and msgs[-1].error() is None:
                msgs.append(Message(topic="d-eof", partition=0, offset=msgs[-1].offset() + 1,
                                    error=KafkaError(KafkaError._PARTITION_EOF)))
            return msgs

    batches = list(fetch.read_range(_options(b, "d-eof"), OffsetRange("d-eof", 0, 0, 5), consumer_factory=EofWithRecords))
    assert [v for batch in batches for v in batch.column("value").to_pylist()] == [f"v{i}".encode() for i in range(5)]


# --- the kernel alone, fuzzed ---------------------------------------------------------------------

def _valid_buffer(seed: int) -> bytes:
    import random

    from strom.records import codec

    rng = random.Random(seed)
    out = b""
    offset = 0
    for _ in range(rng.randrange(1, 5)):
        n = rng.randrange(1, 6)
        recs = [(None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 9)),
                 None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 40)),
                 [("h", b"x"), ("n", None)] if rng.random() < 0.3 else []) for _ in range(n)]
        out += codec.build_batch(recs, base_offset=offset, timestamp_ms=1000 + offset,
                                 codec=rng.choice([codec.NONE, codec.NONE, codec.GZIP, codec.ZSTD]))
        offset += n
    return out


def _check_decode(data: bytes, start: int, until: int, committed: bool) -> None:
    import numpy as np

    aborted = (np.array([5, 7], np.int64), np.array([0, 3], np.int64)) if committed else decode._NO_ABORTED
    try:
        cols, status = decode.decode(decode.as_input(data), start, until, committed, aborted, headers=until % 2 == 0)
        if cols.headers:
            cols.headers_array(fetch.arrow_schema(True).field("headers").type).validate(full=True)
    except decode.CorruptRecords:
        return
    n = len(cols)
    assert status in (decode.DONE, decode.UNTIL)
    assert 0 <= n <= len(cols.offset)
    assert 0 <= cols.state[decode.KEY_USED] <= len(cols.key_data)
    assert 0 <= cols.state[decode.VALUE_USED] <= len(cols.val_data)
    for array in cols.arrays():
        array.validate(full=True)
    offsets = cols.offset[:n]
    assert all(start <= o < until for o in offsets)


def test_kernel_never_crashes_on_random_or_mutated_input() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=300), st.integers(0, 20), st.integers(0, 30), st.booleans())
    def random_bytes(data: bytes, start: int, until: int, committed: bool) -> None:
        _check_decode(data, start, until, committed)

    @settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, 10**6), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
           st.integers(0, 400), st.integers(0, 10), st.integers(0, 30), st.booleans())
    def mutated(seed: int, flips: list[tuple[int, int]], cut: int, start: int, until: int, committed: bool) -> None:
        data = bytearray(_valid_buffer(seed))
        for where, byte in flips:
            data[where % len(data)] = byte
        _check_decode(bytes(data[:len(data) - cut % max(1, len(data))]), start, until, committed)

    random_bytes()
    mutated()


def test_kernel_matches_the_python_decoder_on_valid_input() -> None:
    from strom.records import codec

    for seed in range(200):
        data = _valid_buffer(seed)
        want = [r for r in codec.read_all(data) if 2 <= r.offset < 12]
        cols, _ = decode.decode(decode.as_input(data), 2, 12, headers=True)
        key, value, offset, ts, _ = cols.arrays()
        headers = cols.headers_array(fetch.arrow_schema(True).field("headers").type)
        got = list(zip(offset.to_pylist(), key.to_pylist(), value.to_pylist(),
                       ts.cast(pa.int64()).to_pylist(), headers.to_pylist(), strict=True))
        assert got == [(r.offset, r.key, r.value, r.timestamp * 1000,
                        [{"key": k, "value": v} for k, v in r.headers] or None) for r in want]


def test_no_writable_numba_cache_directory_is_not_an_error() -> None:
    """Where numba finds no directory to cache in (a read-only install, no writable home), the
    decoder is still defined: cached under the temporary directory, or not cached at all."""
    import os
    import subprocess
    import sys

    code = """if True:
        import sys
        import numba.core.caching as caching
        # numba's own places refused; NUMBA_CACHE_DIR (empty here) is the only one left, or none
        caching.CacheImpl._locator_classes = [caching.UserProvidedCacheLocator] if sys.argv[1] == "tmp" else []
        from strom.spark import decode
        print(type(decode.decode_batches._cache).__name__, decode.numba.config.CACHE_DIR)
    """
    for case, want in (("tmp", "FunctionCache"), ("none", "NullCache")):
        out = subprocess.run([sys.executable, "-c", code, case], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "NUMBA_CACHE_DIR": ""})
        assert out.returncode == 0, out.stderr
        kind, _, where = out.stdout.strip().partition(" ")
        assert kind == want, out.stdout
        assert "strom-numba-cache-" in where
