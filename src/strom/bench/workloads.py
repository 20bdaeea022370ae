"""The three workloads: produce, consume and end-to-end (produce and consume in one process)."""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import Any

from strom.bench.common import (
    THROUGHPUT_CONSUMER,
    BenchOptions,
    LiveProgress,
    consumer_config,
    ensure_topic,
    make_payload,
    producer_config,
)
from strom.bench.result import BenchResult
from strom.bench.stats import LatencyRecorder
from strom.cli.common import Failure, kafka_error_message

_POLL_EVERY = 1024  # serve delivery reports and check the clock every this many records


def _rate_text(count: int, start: float, unit: str = "rec/s") -> str:
    elapsed = time.perf_counter() - start
    return f"{count / elapsed:,.0f} {unit}" if elapsed > 0 else ""


class _Deliveries:
    """The producer's delivery reports: counts, errors and latency (produce() -> acknowledgement, measured
    by librdkafka when the acknowledgement arrives, so a late Python callback does not inflate it)."""

    __slots__ = ("acknowledged", "failed", "errors", "latency", "_add", "last_ack")

    def __init__(self) -> None:
        self.acknowledged = 0
        self.failed = 0
        self.errors: dict[str, int] = {}
        self.latency = LatencyRecorder()
        self._add = self.latency.samples.append
        self.last_ack = 0.0

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acknowledged += 1
            lat = msg.latency()
            if lat is not None and lat >= 0:
                self._add(lat * 1000.0)
        else:
            self.failed += 1
            name = err.name() if hasattr(err, "name") else str(err)
            self.errors[name] = self.errors.get(name, 0) + 1
        self.last_ack = time.perf_counter()


def _make_producer(opts: BenchOptions, deliveries: _Deliveries) -> Any:
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(producer_config(opts, on_delivery=deliveries))
    except KafkaException as e:
        raise Failure(f"cannot create producer: {kafka_error_message(e.args[0])}") from None
    producer.list_topics(opts.topic, timeout=opts.client.connect_timeout)  # connect and learn leaders first
    return producer


def _drain(producer: Any, deliveries: _Deliveries, sent: int, timeout: float, progress: LiveProgress,
           start: float) -> bool:
    """Wait for every sent record's delivery report (bounded by ``timeout``); True when all are in."""
    deadline = time.monotonic() + timeout
    while deliveries.acknowledged + deliveries.failed < sent:
        if time.monotonic() > deadline:
            return False
        producer.poll(0.05)
        progress.update(deliveries.acknowledged, _rate_text(deliveries.acknowledged, start))
    return True


def _send_loop(producer: Any, opts: BenchOptions, value_for: Any, deliveries: _Deliveries,
               progress: LiveProgress, start: float, stop: threading.Event | None = None) -> tuple[int, str | None]:
    """Send ``opts.records`` records (paced to ``opts.target_rate`` if set); returns (sent, why it stopped early)."""
    produce = producer.produce
    poll = producer.poll
    topic = opts.topic
    n = opts.records
    rate = opts.target_rate
    end = start + opts.duration if opts.duration > 0 else float("inf")
    fixed = value_for if isinstance(value_for, bytes) else None
    sent = 0
    stopped: str | None = None
    while sent < n:
        if rate > 0:
            due = start + sent / rate
            now = time.perf_counter()
            if now < due:
                poll(due - now)
                continue
        try:
            produce(topic, fixed if fixed is not None else value_for(sent))
        except BufferError:  # local queue full: let librdkafka catch up
            poll(0.005)
            continue
        sent += 1
        if sent % _POLL_EVERY == 0:
            poll(0)
        elif rate <= 0:
            continue
        if time.perf_counter() > end:
            stopped = "duration"
            break
        if stop is not None and stop.is_set():
            stopped = "consumer stopped"
            break
        progress.update(sent, _rate_text(deliveries.acknowledged, start))
    return sent, stopped


def run_produce(opts: BenchOptions) -> BenchResult:
    partitions = ensure_topic(opts)
    result = BenchResult("produce", opts.client.bootstrap, opts.topic, opts.settings("produce"), opts.records)
    result.settings["partitions"] = partitions
    deliveries = _Deliveries()
    producer = _make_producer(opts, deliveries)
    payload = make_payload(opts.record_size)
    cpu0 = time.process_time()
    with LiveProgress(opts.progress, opts.records, "produce") as progress:
        start = time.perf_counter()
        sent, stopped = _send_loop(producer, opts, payload, deliveries, progress, start)
        done = _drain(producer, deliveries, sent, opts.timeout + 5.0, progress, start)
        end = deliveries.last_ack if deliveries.last_ack > start else time.perf_counter()
        progress.update(deliveries.acknowledged, _rate_text(deliveries.acknowledged, start), force=True)
    result.sent = sent
    result.acknowledged = deliveries.acknowledged
    result.failed = deliveries.failed
    result.unresolved = sent - deliveries.acknowledged - deliveries.failed
    result.errors = deliveries.errors
    result.bytes = deliveries.acknowledged * opts.record_size
    result.elapsed_s = end - start
    result.latency = deliveries.latency.summary()
    result.latency_kind = "delivery (produce() to acknowledgement)"
    result.stopped = stopped if done else "delivery timeout"
    result.extra["client_cpu_s"] = round(time.process_time() - cpu0, 3)
    return result


def _assignment(consumer: Any, opts: BenchOptions, at_end: bool) -> tuple[list[Any], int]:
    """Every partition of the topic, at its start (or its current end); and how many records it holds."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    md = consumer.list_topics(opts.topic, timeout=opts.client.connect_timeout)
    tmd = md.topics.get(opts.topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise Failure(f"topic '{opts.topic}' does not exist")
    tps = []
    available = 0
    for p in sorted(tmd.partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(opts.topic, p), timeout=opts.client.connect_timeout)
        available += max(0, high - low)
        tps.append(TopicPartition(opts.topic, p, high if at_end else OFFSET_BEGINNING))
    return tps, available


def run_consume(opts: BenchOptions) -> BenchResult:
    """Read ``opts.records`` records (0: all the topic holds now) from the beginning of every partition."""
    from confluent_kafka import Consumer

    ensure_topic(opts, create=False)
    consumer = Consumer(consumer_config(opts, **THROUGHPUT_CONSUMER))
    try:
        tps, available = _assignment(consumer, opts, at_end=False)
        n = opts.records or available
        result = BenchResult("consume", opts.client.bootstrap, opts.topic, opts.settings("consume"), n)
        result.settings["partitions"] = len(tps)
        result.extra["available_at_start"] = available
        received = 0
        nbytes = 0
        first = 0.0
        last_progress = time.perf_counter()
        consume = consumer.consume
        cpu0 = time.process_time()
        with LiveProgress(opts.progress, n, "consume") as progress:
            start = time.perf_counter()
            end_limit = start + opts.duration if opts.duration > 0 else float("inf")
            consumer.assign(tps)
            last = start
            while received < n:
                msgs = consume(num_messages=min(10_000, max(1, n - received)), timeout=0.1)
                now = time.perf_counter()
                if msgs:
                    good = [m for m in msgs if m.error() is None]
                    for m in msgs:
                        err = m.error()
                        if err is not None:
                            result.note_error(err.name())
                    if good:
                        good = good[: n - received]
                        if not received:
                            first = now
                        received += len(good)
                        nbytes += sum(map(len, good))
                        last = now
                        last_progress = now
                if now > end_limit:
                    result.stopped = "duration"
                    break
                if now - last_progress > opts.timeout:
                    result.stopped = "timeout"
                    break
                progress.update(received, _rate_text(received, start))
            progress.update(received, _rate_text(received, start), force=True)
    finally:
        consumer.close()
    result.received = received
    result.bytes = nbytes
    result.elapsed_s = (last - start) if received else 0.0
    result.extra["first_record_s"] = round(first - start, 6) if received else None
    result.extra["client_cpu_s"] = round(time.process_time() - cpu0, 3)
    return result


_HEADER = struct.Struct(">8sQq")  # run id, sequence number, send time (perf_counter_ns)


def run_e2e(opts: BenchOptions) -> BenchResult:
    """Produce at ``opts.target_rate`` and consume the same records in this process; latency is the time
    from just before produce() (stamped in the record) to the consumer receiving it."""
    from confluent_kafka import Consumer

    if opts.record_size < _HEADER.size:
        raise Failure(f"e2e needs --record-size of at least {_HEADER.size} bytes (it stamps each record)")
    partitions = ensure_topic(opts)
    result = BenchResult("e2e", opts.client.bootstrap, opts.topic, opts.settings("e2e"), opts.records)
    result.settings["partitions"] = partitions
    run_id = os.urandom(8)
    padding = make_payload(opts.record_size - _HEADER.size)
    pack = _HEADER.pack
    clock = time.perf_counter_ns

    def value_for(seq: int) -> bytes:
        return pack(run_id, seq, clock()) + padding

    n = opts.records
    seen = bytearray(n)
    latency = LatencyRecorder()
    counts = {"received": 0, "unique": 0, "duplicates": 0, "foreign": 0, "bytes": 0}
    consumer_errors: dict[str, int] = {}
    last_receive = [0.0]
    producer_done = threading.Event()
    stop = threading.Event()
    consumer = Consumer(consumer_config(opts))
    tps, _ = _assignment(consumer, opts, at_end=True)
    consumer.assign(tps)
    consumer.consume(num_messages=1, timeout=1.0)  # connect and start fetching before the first record
    unpack = _HEADER.unpack_from
    hsize = _HEADER.size
    add = latency.samples.append
    poll = consumer.poll
    consume = consumer.consume
    deliveries = _Deliveries()

    def consume_loop() -> None:
        idle_since = None
        try:
            while not stop.is_set():
                # poll() returns as soon as one record is there (consume(n, t) would wait for n or t);
                # then take whatever else is already queued without waiting.
                first = poll(0.05)
                now_ns = clock()
                if first is not None:
                    msgs = [first, *consume(num_messages=1000, timeout=0)]
                    for m in msgs:
                        err = m.error()
                        if err is not None:
                            consumer_errors[err.name()] = consumer_errors.get(err.name(), 0) + 1
                            continue
                        value = m.value()
                        if value is None or len(value) < hsize:
                            counts["foreign"] += 1
                            continue
                        rid, seq, sent_ns = unpack(value)
                        if rid != run_id or seq >= n:
                            counts["foreign"] += 1
                            continue
                        counts["received"] += 1
                        counts["bytes"] += len(value)
                        if seen[seq]:
                            counts["duplicates"] += 1
                        else:
                            seen[seq] = 1
                            counts["unique"] += 1
                        add((now_ns - sent_ns) / 1e6)
                    last_receive[0] = time.perf_counter()
                    idle_since = None
                if producer_done.is_set():
                    if counts["unique"] >= deliveries.acknowledged:
                        break
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > opts.timeout:
                        result.stopped = "timeout waiting for the consumer"
                        break
        finally:
            stop.set()

    producer = _make_producer(opts, deliveries)
    reader = threading.Thread(target=consume_loop, name="strom-bench-e2e-consumer", daemon=True)
    cpu0 = time.process_time()
    try:
        with LiveProgress(opts.progress, n, "e2e") as progress:
            start = time.perf_counter()
            reader.start()
            sent, stopped = _send_loop(producer, opts, value_for, deliveries, progress, start, stop)
            done = _drain(producer, deliveries, sent, opts.timeout + 5.0, progress, start)
            producer_done.set()
            while reader.is_alive():
                reader.join(0.1)
                progress.update(counts["unique"], _rate_text(counts["unique"], start),
                                description="e2e (receiving)")
            progress.update(counts["unique"], _rate_text(counts["unique"], start), force=True)
    finally:
        stop.set()
        reader.join(5.0)
        consumer.close()
    result.sent = sent
    result.acknowledged = deliveries.acknowledged
    result.failed = deliveries.failed
    result.unresolved = sent - deliveries.acknowledged - deliveries.failed
    result.errors = dict(deliveries.errors)
    for k, v in consumer_errors.items():
        result.errors[f"consumer:{k}"] = v
    result.received = counts["received"]
    result.unique = counts["unique"]
    result.duplicates = counts["duplicates"]
    result.lost = max(0, deliveries.acknowledged - counts["unique"])
    result.bytes = counts["bytes"]
    result.elapsed_s = (last_receive[0] - start) if counts["received"] else 0.0
    result.latency = latency.summary()
    result.latency_kind = "end to end (before produce() to consumer receive)"
    delivery = deliveries.latency.summary()
    result.extra["delivery_latency_ms"] = None if delivery is None else {
        k: round(getattr(delivery, k), 4) for k in ("p50", "p95", "p99", "p99_9", "max")}
    result.extra["client_cpu_s"] = round(time.process_time() - cpu0, 3)
    if counts["foreign"]:
        result.extra["foreign_records"] = counts["foreign"]
    if result.stopped is None:
        result.stopped = stopped if done else "delivery timeout"
    return result
