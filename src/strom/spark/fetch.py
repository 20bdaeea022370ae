"""Executor side: read one exact offset range of one partition into Arrow record batches.

A confluent-kafka (librdkafka) consumer is assigned the partition at the range's first offset (no
group membership, nothing committed) and reads until the range's end. Columns are gathered in
Python lists and turned into Arrow arrays once per batch, which Spark takes as they are: no
per-value conversion on Spark's side.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import operator
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from strom.spark.options import SourceOptions
from strom.spark.planning import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("strom.spark")
_T = TypeVar("_T")

BATCH_ROWS = 8192  # rows per Arrow record batch handed to Spark
# Errors librdkafka reports while a broker restarts or a partition's leadership moves; it recovers
# from them by itself (the names are confluent_kafka.KafkaError's).
_TRANSIENT_NAMES = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_NOENT", "_TIMED_OUT", "LEADER_NOT_AVAILABLE",
                    "NOT_LEADER_FOR_PARTITION", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "REQUEST_TIMED_OUT",
                    "NOT_ENOUGH_REPLICAS", "BROKER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE")


def transient_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, n) for n in _TRANSIENT_NAMES if hasattr(KafkaError, n))

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_MS = datetime.timedelta(milliseconds=1)


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, DeleteRecords, a deleted or truncated partition)."""


def data_loss(message: str, fail: bool) -> None:
    """Spark's reportDataLoss: raise when failOnDataLoss is true (the default), else log and go on."""
    if fail:
        raise DataLossError(
            f"{message} Some data may have been lost because it is no longer available in strom: "
            "removed by retention or DeleteRecords, or the topic was deleted. If this is expected, set the "
            "source option 'failOnDataLoss' to 'false' to skip the missing offsets.")
    log.warning("%s Some data may have been lost; failOnDataLoss is false, so the query goes on.", message)


def lost_before_log_start(name: str, start: int, until: int, low: int, fail: bool) -> None:
    """Data loss of the offsets of [start, until) below the log's start ``low``."""
    data_loss(f"Offsets [{start}, {min(low, until)}) of {name} are gone: the log now starts at {low}.", fail)


def lost_past_log_end(name: str, start: int, until: int, high: int, fail: bool) -> None:
    """Data loss of the offsets of [start, until) at or past the log's end ``high``."""
    data_loss(f"Offsets [{max(high, start)}, {until}) of {name} are gone: the log now ends at {high}.", fail)


# How often a partition's end is read again while it is short of a range's end.
END_RECHECK_S = 0.2


def log_end_reaching(read: Callable[[], tuple[int, int]], until: int, timeout_s: float, name: str,
                     seen: tuple[int, int] | None = None) -> tuple[int, int]:
    """The partition's (low, high) from ``read`` (or ``seen``, a reading just made), read again
    while high is short of ``until``, for up to ``timeout_s`` (kafkaConsumer.pollTimeoutMs, as long
    as Spark's own reader polls). A range ends at a high watermark seen when it was planned; a
    leader that has just taken over answers with its own, which its followers' next fetches raise
    to the old leader's, so for a moment the log seems to end short of the range. Only a log that
    stays short is data loss."""
    low, high = seen if seen is not None else read()
    if high >= until:
        return low, high
    log.info("%s ends at %d, short of the range's end %d: waiting up to %.0f s for it", name, high, until,
             timeout_s)
    deadline = time.monotonic() + timeout_s
    while high < until and time.monotonic() < deadline:
        time.sleep(END_RECHECK_S)
        low, high = read()
    return low, high


def range_in_log(name: str, start: int, until: int, read: Callable[[], tuple[int, int]], timeout_s: float,
                 fail: bool) -> tuple[int, int]:
    """The part of [start, until) the partition's log still holds, its watermarks from ``read``;
    what the log no longer holds is data loss (see `data_loss`). An end short of ``until`` is
    waited for first (see `log_end_reaching`)."""
    low, high = read()
    if start < low:
        lost_before_log_start(name, start, until, low, fail)
        start = low
    _, high = log_end_reaching(read, until, timeout_s, name, seen=(low, high))
    if high < until:
        lost_past_log_end(name, start, until, high, fail)
        until = high
    return start, until


# librdkafka stops fetching a partition once queued.min.messages (100,000) records wait in its queue
# and then sleeps fetch.queue.backoff.ms (1,000 ms): with small records a task idled most of each
# second (about 200,000 records/s). A queue as deep as the range (up to a million records) and a
# short back-off keep the fetches flowing without fetching far past the range's end;
# queued.max.messages.kbytes (64 MiB) still bounds the memory. A kafka.* option overrides these.
QUEUED_MIN_MESSAGES = (1_000, 1_000_000)
FETCH_QUEUE_BACKOFF_MS = 10


def consumer_config(options: SourceOptions, records: int = QUEUED_MIN_MESSAGES[1]) -> dict[str, Any]:
    """The executor's consumer for a range of ``records`` offsets."""
    low, high = QUEUED_MIN_MESSAGES
    conf: dict[str, Any] = {"queued.min.messages": min(high, max(low, records)),
                            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                            **options.client.client_config()}
    conf.update({
        "group.id": options.group_id or f"spark-strom-source-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",       # an out-of-range offset is reported, never silently reset
        "enable.partition.eof": True,       # tells us the end of the log was reached
        "isolation.level": options.isolation_level,
    })
    return conf


def _watermarks(consumer: Any, tp: Any, transient: frozenset[int], patience_s: float = 30.0) -> tuple[int, int]:
    """The partition's (low, high) watermarks from its leader, asked again while a leadership moves."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + patience_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            return int(low), int(high)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is None or err.code() not in transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            # librdkafka asks the leader it knows; a metadata request makes it learn the new one.
            with contextlib.suppress(KafkaException):
                consumer.list_topics(tp.topic, timeout=5)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source schema, as Spark derives it (all fields nullable, UTC timestamps)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()),
                                                               pa.field("value", pa.binary())]))))
    return pa.schema(fields)


class _Columns:
    """Column lists for one Arrow batch."""

    def __init__(self, include_headers: bool) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.ts: list[tuple[int, int]] = []  # librdkafka's (type, ms)
        self.headers: list[Any] | None = [] if include_headers else None

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, m: Any) -> None:
        self.keys.append(m.key())
        self.values.append(m.value())
        self.offsets.append(m.offset())
        self.ts.append(m.timestamp())
        if self.headers is not None:
            self.headers.append(m.headers() or None)

    def add_all(self, msgs: list[Any]) -> None:
        # One pass per column, map() over Message's C methods: no Python bytecode per record.
        from confluent_kafka import Message

        self.keys += map(Message.key, msgs)
        self.values += map(Message.value, msgs)
        self.offsets += map(Message.offset, msgs)  # type: ignore[arg-type]  # records always have one
        self.ts += map(Message.timestamp, msgs)
        if self.headers is not None:
            self.headers += [m.headers() or None for m in msgs]

    def timestamps_ms(self) -> list[int]:
        return list(map(_SECOND, self.ts))

    def timestamp_types(self) -> list[int]:
        """Spark's timestampType: 0 CreateTime, 1 LogAppendTime (librdkafka says 1 and 2)."""
        return [t[0] - 1 for t in self.ts]

    def to_tuples(self, topic: str, partition: int) -> Iterator[tuple[Any, ...]]:
        n = len(self.offsets)
        stamps = [_EPOCH + t * _MS for t in self.timestamps_ms()]
        columns: list[list[Any]] = [self.keys, self.values, [topic] * n, [partition] * n, self.offsets, stamps,
                                    self.timestamp_types()]
        if self.headers is not None:
            columns.append(self.headers)
        return zip(*columns, strict=True)

    def to_batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.offsets)
        # librdkafka's timestamp type (1 CreateTime, 2 LogAppendTime) less one is Spark's.
        ts_types = pc.subtract(pa.array(map(_FIRST, self.ts), pa.int32(), size=n), pa.scalar(1, pa.int32()))
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(pa.array(map(_SECOND, self.ts), pa.int64(), size=n), 1000).cast(pa.timestamp("us", tz="UTC")),
            ts_types,
        ]
        if self.headers is not None:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(options: SourceOptions, r: OffsetRange, *, batch_rows: int = BATCH_ROWS,
               consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the records of offsets [r.from_offset, r.until_offset) as Arrow record batches."""
    return _gc_paused(_arrow_batches(options, r, batch_rows, consumer_factory))


def _arrow_batches(options: SourceOptions, r: OffsetRange, batch_rows: int,
                   consumer_factory: Callable[[dict[str, Any]], Any] | None) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(options.include_headers)
    for cols in _read_columns(options, r, batch_rows, consumer_factory):
        yield cols.to_batch(schema, r.topic, r.partition)


def read_range_tuples(options: SourceOptions, r: OffsetRange, *, batch_rows: int = BATCH_ROWS,
                      consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> Iterator[tuple[Any, ...]]:
    """The same records as Python tuples, one per row (the slower form Spark converts value by value;
    kept to measure against, and for the option arrow=false)."""
    for cols in read_columns(options, r, batch_rows=batch_rows, consumer_factory=consumer_factory):
        yield from cols.to_tuples(r.topic, r.partition)


def read_columns(options: SourceOptions, r: OffsetRange, *, batch_rows: int = BATCH_ROWS,
                 consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> Iterator[_Columns]:
    """Read offsets [r.from_offset, r.until_offset), `batch_rows` records at a time, as column lists.

    Offsets that no longer exist are data loss (see `data_loss`); gaps inside the range (compacted
    records, transaction markers) are not.
    """
    return _gc_paused(_read_columns(options, r, batch_rows, consumer_factory))


def _read_columns(options: SourceOptions, r: OffsetRange, batch_rows: int,
                  consumer_factory: Callable[[dict[str, Any]], Any] | None) -> Iterator[_Columns]:
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

    if r.until_offset <= r.from_offset:
        return
    consumer: Any = (consumer_factory or Consumer)(consumer_config(options, r.until_offset - r.from_offset))
    fail = options.fail_on_data_loss
    name = f"{r.topic}-{r.partition}"
    transient = transient_codes()
    timeout_s = options.poll_timeout_ms / 1000.0
    tp = TopicPartition(r.topic, r.partition)

    def read_watermarks() -> tuple[int, int]:
        return _watermarks(consumer, tp, transient)

    try:
        start, until = range_in_log(name, r.from_offset, r.until_offset, read_watermarks, timeout_s, fail)
        if until <= start:
            return
        consumer.assign([TopicPartition(r.topic, r.partition, start)])
        cols = _Columns(options.include_headers)
        next_offset = start
        last_progress = time.monotonic()
        while next_offset < until:
            # Ask for exactly what is left: librdkafka returns as soon as that many arrived.
            msgs: list[Any] = consumer.consume(num_messages=min(batch_rows - len(cols), until - next_offset), timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > timeout_s:
                    raise TimeoutError(
                        f"no record of {name} at or after offset {next_offset} within "
                        f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} (range ends at {until})")
                continue
            last_progress = time.monotonic()
            # Truth, not ==: confluent-kafka's KafkaError == None raises inside C (a SystemError).
            if not any(map(Message.error, msgs)) and msgs[-1].offset() < until:
                # The common case, records only and all inside the range: column by column.
                cols.add_all(msgs)
                next_offset = msgs[-1].offset() + 1
                msgs = []  # the Messages go now, not after the caller has had the batch
                if len(cols) >= batch_rows:
                    yield cols
                    cols = _Columns(options.include_headers)
                continue
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        # The end of the log: the rest of the range is markers or compacted away,
                        # unless the log was truncated below the range's end.
                        _, high = log_end_reaching(read_watermarks, until, timeout_s, name)
                        if high < until:
                            lost_past_log_end(name, next_offset, until, high, fail)
                        if m.offset() >= min(high, until) or high < until:
                            done = True
                            break
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        low, high = read_watermarks()
                        if next_offset < low:
                            lost_before_log_start(name, next_offset, until, low, fail)
                            next_offset = low
                            if next_offset >= until:
                                done = True
                                break
                            consumer.assign([TopicPartition(r.topic, r.partition, next_offset)])
                            break
                        raise RuntimeError(f"reading {name} at offset {next_offset}: {err}")
                    if err.fatal() or not (err.retriable() or code in transient):
                        raise RuntimeError(f"reading {name} at offset {next_offset}: {err}")
                    # A broker went away or a leadership moved: librdkafka finds the new leader.
                    log.info("reading %s at offset %d: %s (the client retries)", name, next_offset, err)
                    continue
                off = m.offset()
                if off >= until:
                    done = True
                    break
                cols.add(m)
                next_offset = off + 1
            if len(cols) >= batch_rows:
                yield cols
                cols = _Columns(options.include_headers)
            if done:
                break
        if len(cols):
            yield cols
    finally:
        consumer.close()


def _gc_paused(steps: Iterator[_T]) -> Iterator[_T]:
    """Run each step of ``steps`` with the cyclic garbage collector paused.

    Every librdkafka Message is an object the collector tracks: at a million a second its young
    generation fills constantly and each collection walks the column lists (a fifth of a task's
    time). The records form no cycles. The collector is on again whenever the caller runs, so a
    reader that stops early leaves nothing switched off.
    """
    while True:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            item = next(steps)
        except StopIteration:
            return
        finally:
            if was_enabled:
                gc.enable()
        yield item
