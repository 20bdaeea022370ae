"""Executor side, direct reader: one offset range of one partition read with Fetch requests of our own
and decoded by strom.spark.decode into Arrow record batches, with no Python object per record.

The records, columns and errors are those of the consumer reader (strom.spark.fetch.read_range):
the same Arrow schema and contents, the same data-loss rules (failOnDataLoss), the same time limit
(kafkaConsumer.pollTimeoutMs). What the consumer reader would take from librdkafka is done here:
the partition's leader is found with Metadata from the bootstrap servers, Fetch goes to it (TLS and
SASL through strom.client.RawConnection), and a moved leadership, a lost connection or a time-out
makes it ask Metadata again and go on, until pollTimeoutMs passes without progress.
"""

from __future__ import annotations

import datetime
import functools
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from strom.spark.fetch import (
    BATCH_ROWS,
    arrow_schema,
    log_end_reaching,
    lost_before_log_start,
    lost_past_log_end,
    range_in_log,
)
from strom.spark.options import SourceOptions
from strom.spark.planning import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

    from strom.client.raw_connection import RawConnection

log = logging.getLogger("strom.spark")

FETCH_VERSION = 12        # topic names (v13 on needs topic ids), flexible, isolation level, aborted txns
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
MAX_WAIT_MS = 500
# Bytes one Fetch asks for: enough for throughput (a 32 MiB response holds ~250k records of 100 B),
# bounded by what is left of the range once the records' size is known.
MAX_FETCH_BYTES = 32 << 20
MIN_FETCH_BYTES = 64 << 10
FIRST_RECORD_GUESS = 1024  # bytes per record assumed before the first response says
SOCKET_TIMEOUT_S = 30.0
RETRY_PAUSE_S = 0.2


@functools.cache
def retriable() -> frozenset[int]:
    """Kafka's error codes after which the leader is looked up again and the Fetch retried (made on
    first use: strom.protocol.errors loads kio, which importing this module does not)."""
    from strom.protocol.errors import ErrorCode as E

    return frozenset({
        E.unknown_topic_or_partition,  # a new leader that has not loaded the partition yet
        E.leader_not_available,
        E.not_leader_or_follower,
        E.request_timed_out,
        E.replica_not_available,
        E.not_enough_replicas,
        E.kafka_storage_error,
        E.fenced_leader_epoch,
        E.unknown_leader_epoch,
    })


_numba_usable: bool | None = None


def numba_usable() -> bool:
    """Whether the compiled decoder can be loaded here (numba and numpy import), asked once per
    process. Compiles nothing."""
    global _numba_usable
    if _numba_usable is None:
        try:
            import numba  # noqa: F401
            import numpy  # noqa: F401
            _numba_usable = True
        except ImportError:
            _numba_usable = False
    return _numba_usable


def use_direct(options: SourceOptions) -> bool:
    """Which reader a task uses: the direct one when asked for, or with reader=auto when numba is
    there and no option needs the consumer reader (SourceOptions.direct_blockers)."""
    if options.reader == "consumer":
        return False
    if options.reader == "direct":
        if not numba_usable():
            raise RuntimeError("option reader=direct: numba is not installed where this task runs "
                               "(pip install numba, or the strom[spark] extra)")
        return True
    return numba_usable() and not options.direct_blockers()


_logged: set[str] = set()


def read_range_any(options: SourceOptions, r: OffsetRange, *, batch_rows: int = BATCH_ROWS
                   ) -> Iterator[pa.RecordBatch]:
    """The range's Arrow record batches from the reader use_direct picks."""
    from strom.spark import fetch

    direct = use_direct(options)
    kind = "direct" if direct else "consumer"
    if kind not in _logged:
        _logged.add(kind)
        why = "" if direct or options.reader == "consumer" else (
            " (numba is not installed)" if not numba_usable() else f" ({', '.join(options.direct_blockers())})")
        log.debug("strom source tasks in this process read with the %s reader%s", kind, why)
    if direct:
        return read_range(options, r, batch_rows=batch_rows)
    return fetch.read_range(options, r, batch_rows=batch_rows)


class _Retry(Exception):
    """A failure after which the leader is looked up again."""


def _ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def _schema(api: str, version: int) -> Any:
    """kio's request classes of one API version (a module: its classes are typed, ints are not)."""
    import importlib

    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if item:
            host, _, port = item.rpartition(":")
            out.append((host.strip("[]") or "localhost", int(port or 9092)))
    return out


class PartitionClient:
    """Metadata, ListOffsets and Fetch for one partition, on a connection to its leader."""

    def __init__(self, options: SourceOptions, topic: str, partition: int) -> None:
        from strom.security.client_properties import client_security

        self.options = options
        self.topic = topic
        self.partition = partition
        conf = options.client.client_config()
        if "sasl.mechanisms" in conf:  # librdkafka's name for it
            conf.setdefault("sasl.mechanism", conf["sasl.mechanisms"])
        self.security = client_security(conf)
        self.client_id = str(conf.get("client.id") or "strom-spark")
        self.bootstrap = _servers(options.client.bootstrap_servers)
        self.isolation = 1 if options.isolation_level == "read_committed" else 0
        self.conn: RawConnection | None = None
        self.leader_epoch = -1

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _connect(self, host: str, port: int) -> RawConnection:
        from strom.client.raw_connection import RawConnection

        return RawConnection(host, port, SOCKET_TIMEOUT_S, self.security, client_id=self.client_id,
                             max_response=MAX_FETCH_BYTES + (16 << 20))

    def _find_leader(self) -> tuple[str, int]:
        """The leader's (host, port), asked of the bootstrap servers in turn."""
        m = _schema("metadata", METADATA_VERSION)
        body = m.MetadataRequest(topics=(m.MetadataRequestTopic(topic_id=None, name=self.topic),), allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
        errors = []
        for host, port in self.bootstrap:
            try:
                with self._connect(host, port) as conn:
                    md = conn.request(3, METADATA_VERSION, body)
            except OSError as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            brokers = {int(b.node_id): (b.host, int(b.port)) for b in md.brokers}
            for t in md.topics:
                if t.name != self.topic:
                    continue
                if int(t.error_code):
                    raise _Retry(f"Metadata: error {int(t.error_code)} for topic {self.topic}")
                for p in t.partitions:
                    if int(p.partition_index) == self.partition:
                        if int(p.error_code) or int(p.leader_id) not in brokers:
                            raise _Retry(f"Metadata: no leader for {self.topic}-{self.partition} "
                                         f"(error {int(p.error_code)}, leader {int(p.leader_id)})")
                        self.leader_epoch = int(p.leader_epoch)
                        return brokers[int(p.leader_id)]
            raise _Retry(f"Metadata: {self.topic}-{self.partition} not found")
        raise _Retry("no bootstrap server answered: " + "; ".join(errors))

    def connection(self) -> RawConnection:
        if self.conn is None:
            host, port = self._find_leader()
            try:
                self.conn = self._connect(host, port)
            except OSError as e:
                raise _Retry(f"connecting to the leader {host}:{port}: {e}") from None
        return self.conn

    def _request(self, api_key: int, version: int, body: Any) -> Any:
        conn = self.connection()
        try:
            return conn.request(api_key, version, body)
        except OSError as e:  # a closed connection or a time-out (socket.timeout is an OSError)
            self.close()
            raise _Retry(f"{type(e).__name__}: {e}") from None

    def watermarks(self) -> tuple[int, int]:
        """(log start, end) with ListOffsets: the end is the high watermark, or the last stable
        offset under read_committed (what librdkafka answers for the consumer reader)."""
        m = _schema("list_offsets", LIST_OFFSETS_VERSION)
        out = []
        for ts in (-2, -1):
            body = m.ListOffsetsRequest(replica_id=-1, isolation_level=self.isolation, topics=(m.ListOffsetsTopic(
                name=self.topic, partitions=(m.ListOffsetsPartition(partition_index=self.partition,
                                                                  current_leader_epoch=-1, timestamp=ts),)),))
            resp = self._request(2, LIST_OFFSETS_VERSION, body)
            (p,) = resp.topics[0].partitions
            code = int(p.error_code)
            if code:
                self._error(code, "ListOffsets")
            out.append(int(p.offset))
        return out[0], out[1]

    def fetch(self, offset: int, max_bytes: int) -> Any:
        """One Fetch of the partition from ``offset``: the partition's response (error code zero)."""
        m = _schema("fetch", FETCH_VERSION)
        body = m.FetchRequest(
            replica_id=-1, max_wait=_ms(MAX_WAIT_MS), min_bytes=1, max_bytes=max_bytes,
            isolation_level=self.isolation, session_id=0, session_epoch=-1,
            topics=(m.FetchTopic(topic=self.topic, partitions=(m.FetchPartition(
                partition=self.partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=max_bytes),)),),
            forgotten_topics_data=(), rack_id="")
        resp = self._request(1, FETCH_VERSION, body)
        if int(resp.error_code):
            self._error(int(resp.error_code), "Fetch")
        for t in resp.responses:
            for p in t.partitions:
                if int(p.partition_index) == self.partition:
                    return p
        raise _Retry("the Fetch response has no data for the partition")

    def _error(self, code: int, what: str) -> None:
        from strom.protocol.errors import ErrorCode

        try:
            name = ErrorCode(code).name.upper()
        except ValueError:
            name = str(code)
        if code in retriable():
            self.close()  # maybe no longer the leader: look it up again
            raise _Retry(f"{what}: {name}")
        raise RuntimeError(f"{what} of {self.topic}-{self.partition}: error {name}")


def read_range(options: SourceOptions, r: OffsetRange, *, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Yield the records of offsets [r.from_offset, r.until_offset) as Arrow record batches of up to
    ``batch_rows`` rows (slices of one Fetch response's columns: no copy)."""
    import pyarrow as pa

    from strom.protocol.errors import ErrorCode
    from strom.spark import decode as dec

    if r.until_offset <= r.from_offset:
        return
    headers = options.include_headers
    schema = arrow_schema(headers)
    # The constant columns, made once and sliced for each batch.
    topics = pa.repeat(pa.scalar(r.topic, pa.string()), batch_rows)
    partitions = pa.repeat(pa.scalar(r.partition, pa.int32()), batch_rows)
    name = f"{r.topic}-{r.partition}"
    fail = options.fail_on_data_loss
    timeout_s = options.poll_timeout_ms / 1000.0
    read_committed = options.isolation_level == "read_committed"
    client = PartitionClient(options, r.topic, r.partition)
    start, until = r.from_offset, r.until_offset
    last_progress = time.monotonic()

    def pause_or_give_up(e: _Retry) -> None:
        """After a retriable failure: a short pause, or TimeoutError once pollTimeoutMs has passed
        without progress."""
        if time.monotonic() - last_progress > timeout_s:
            raise TimeoutError(
                f"no record of {name} at or after offset {start} within "
                f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} (range ends at {until}; "
                f"last error: {e})") from None
        log.info("reading %s at offset %d: %s (retrying)", name, start, e)
        time.sleep(RETRY_PAUSE_S)

    def retrying(fn: Any, *args: Any) -> Any:
        while True:
            try:
                return fn(*args)
            except _Retry as e:
                pause_or_give_up(e)

    def read_watermarks() -> tuple[int, int]:
        return retrying(client.watermarks)  # type: ignore[no-any-return]

    try:
        start, until = range_in_log(name, start, until, read_watermarks, timeout_s, fail)
        bytes_per_record = float(FIRST_RECORD_GUESS)
        while start < until:
            want = int((until - start) * bytes_per_record * 1.1) + 4096
            max_bytes = max(MIN_FETCH_BYTES, min(MAX_FETCH_BYTES, want))
            p = retrying(client.fetch, start, max_bytes)
            code = int(p.error_code)
            if code == ErrorCode.offset_out_of_range:
                low, high = read_watermarks()
                if start < low:
                    lost_before_log_start(name, start, until, low, fail)
                    start = low
                    continue
                low, high = log_end_reaching(read_watermarks, start + 1, timeout_s, name, seen=(low, high))
                if high <= start:
                    lost_past_log_end(name, start, until, high, fail)
                    return
                # The log holds start after all: the answer came from a leader that has just lost
                # or taken over the partition. Ask again.
                pause_or_give_up(_Retry(f"Fetch: OFFSET_OUT_OF_RANGE while the log holds [{low}, {high})"))
                continue
            if code:
                try:
                    client._error(code, "Fetch")
                except _Retry as e:
                    pause_or_give_up(e)
                    continue
            records = p.records
            if not records:
                # Nothing at or after start: the end of the log (under read_committed, the last
                # stable offset). The rest of the range is markers or compacted away, unless the log
                # was cut below the range's end.
                end = int(p.last_stable_offset) if read_committed else int(p.high_watermark)
                if start >= end:
                    _, high = log_end_reaching(read_watermarks, until, timeout_s, name)
                    if high < until:
                        lost_past_log_end(name, start, until, high, fail)
                    if start >= min(high, until) or high < until:
                        return
                if time.monotonic() - last_progress > timeout_s:
                    raise TimeoutError(
                        f"no record of {name} at or after offset {start} within "
                        f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} (range ends at {until})")
                continue
            aborted = dec.aborted_arrays(p.aborted_transactions) if read_committed else dec._NO_ABORTED
            buf = dec.as_input(records)
            try:
                cols, status = dec.decode(buf, start, until, read_committed, aborted, headers)
            except dec.CorruptRecords as e:
                raise RuntimeError(f"reading {name} at offset {start}: {e}") from None
            del buf, records, p
            next_fetch = int(cols.state[dec.NEXT_FETCH])
            if status != dec.UNTIL and next_fetch <= start:
                # No whole batch at or after start: one larger than the bytes asked for.
                if max_bytes >= MAX_FETCH_BYTES:
                    raise RuntimeError(f"reading {name} at offset {start}: a record batch larger than "
                                       f"{MAX_FETCH_BYTES} bytes")
                bytes_per_record = max(bytes_per_record, MAX_FETCH_BYTES / max(1, until - start))
                continue
            last_progress = time.monotonic()
            n = len(cols)
            if n:
                span = int(cols.state[dec.POS])
                bytes_per_record = max(16.0, span / max(1, n))
                columns = list(cols.arrays())
                if headers:
                    try:
                        columns.append(cols.headers_array(schema.field("headers").type))
                    except dec.CorruptRecords as e:
                        raise RuntimeError(f"reading {name} at offset {start}: {e}") from None
                key, value, offset, ts, ts_type = columns[:5]
                for i in range(0, n, batch_rows):
                    k = min(batch_rows, n - i)
                    yield pa.RecordBatch.from_arrays(
                        [key.slice(i, k), value.slice(i, k), topics.slice(0, k), partitions.slice(0, k),
                         offset.slice(i, k), ts.slice(i, k), ts_type.slice(i, k)]
                        + [c.slice(i, k) for c in columns[5:]],
                        schema=schema)
            if status == dec.UNTIL:
                return
            start = max(start, next_fetch)
    finally:
        client.close()
