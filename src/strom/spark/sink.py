"""Executor side of the sink: produce the rows of a DataFrame (Arrow batches) to strom.

Columns, as in Spark's Kafka sink: value (binary or string, required), key (binary or string),
topic (string; the 'topic' option overrides it), partition (int), headers
(array<struct<key: string, value: binary>>). Other columns are ignored.

A batch write is at-least-once, as with Spark's Kafka sink: a task that fails after producing is
retried whole. A streaming write is exactly-once for read_committed readers (option exactlyOnce,
on by default): see produce_exactly_once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.spark.options import SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

FLUSH_TIMEOUT_S = 120.0


class SinkSchemaError(ValueError):
    pass


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's KafkaWriter.validateQuery, with the same messages in spirit."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SinkSchemaError("Required attribute 'value' not found: the DataFrame to write needs a value column")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise SinkSchemaError(f"{name} attribute type must be a string or binary, not {fields[name].simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise SinkSchemaError("topic option required when no 'topic' attribute is present; "
                              "set the option 'topic' or add a topic column")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SinkSchemaError(f"topic attribute type must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SinkSchemaError(f"partition attribute type must be an int, not {fields['partition'].simpleString()}")
    if options.include_headers and "headers" not in fields:
        raise SinkSchemaError("option 'includeHeaders' is true but the DataFrame has no headers column")
    if "headers" in fields and options.include_headers is not False:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise SinkSchemaError("headers attribute type must be array<struct<key:string,value:binary>>, "
                                  f"not {h.simpleString()}")


def producer_config(options: SinkOptions) -> dict[str, Any]:
    conf: dict[str, Any] = dict(options.client.client_config())
    conf.setdefault("enable.idempotence", True)   # a retried send is written once (Java's default)
    conf.setdefault("linger.ms", 5)
    # librdkafka's local queue holds 100,000 records by default: a task producing small records
    # filled it within a tenth of a second and then waited for deliveries. A deeper queue (bounded
    # in bytes too) keeps batches of a megabyte going out.
    conf.setdefault("queue.buffering.max.messages", 1_000_000)
    conf.setdefault("queue.buffering.max.kbytes", 262_144)
    conf.setdefault("batch.size", 1_000_000)
    conf["delivery.report.only.error"] = True
    return conf


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    names = [n.lower() for n in batch.schema.names]
    if name not in names:
        return None
    return batch.column(names.index(name)).to_pylist()  # type: ignore[no-any-return]


def produce_batches(options: SinkOptions, batches: Iterable[pa.RecordBatch],
                    producer_factory: Callable[[dict[str, Any]], Any] | None = None) -> int:
    """Produce every row; returns how many. Raises if any record was not acknowledged."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    conf = producer_config(options)
    conf["on_delivery"] = on_delivery
    producer = (producer_factory or Producer)(conf)
    count = _produce_rows(options, batches, producer, errors)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise KafkaException(f"writing to strom failed: {'; '.join(errors)}")
    if remaining:
        raise KafkaException(f"writing to strom failed: {remaining} records not acknowledged within {FLUSH_TIMEOUT_S}s")
    return count


def _produce_rows(options: SinkOptions, batches: Iterable[pa.RecordBatch], producer: Any, errors: list[str],
                  first_topic: list[str] | None = None) -> int:
    """Hand every row to ``producer`` (not flushed); how many. ``first_topic`` gets the first row's topic."""
    count = 0
    produce = producer.produce
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _column(batch, "value") or [None] * n
        keys = _column(batch, "key") or [None] * n
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers") if options.include_headers is not False else None
        if options.topic and partitions is None and headers is None:
            # The common case, one topic and the producer's partitioner: nothing to look at per row
            # but the key and value.
            topic = options.topic
            if first_topic is not None and not first_topic:
                first_topic.append(topic)
            for value, key in zip(values, keys, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    _produce_when_room(producer, topic, value, key)
                    if errors:  # deliveries are reported only while polling
                        break
            count += n
            producer.poll(0)
            if errors:
                break
            continue
        topics = [options.topic] * n if options.topic else (_column(batch, "topic") or [None] * n)
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise SinkSchemaError("null topic present in the data; set the option 'topic' or fill the topic column")
            if first_topic is not None and not first_topic:
                first_topic.append(topic)
            kwargs: dict[str, Any] = {}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    producer.produce(topic, value=values[i], key=keys[i], **kwargs)
                    break
                except BufferError:
                    producer.poll(0.005)  # the local queue is full: serve deliveries, then retry
            if errors:
                break
        count += n
        producer.poll(0)
        if errors:
            break
    return count


def _produce_when_room(producer: Any, topic: str, value: Any, key: Any) -> None:
    """produce() once the local queue has room again: deliveries are served meanwhile."""
    while True:
        producer.poll(0.005)
        try:
            producer.produce(topic, value, key)
            return
        except BufferError:
            continue


@dataclass(frozen=True)
class WriteScope:
    """Which part of which micro-batch a task writes: Spark's query id and batch id (task-local
    properties) and the task's partition."""

    query_id: str
    batch_id: int
    partition: int

    @staticmethod
    def of_this_task() -> WriteScope:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty(QUERY_ID_KEY) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID_KEY) if ctx is not None else None
        if ctx is None or query is None or batch is None:
            raise RuntimeError("exactlyOnce writes run in a streaming query's micro-batch (no query or batch id "
                               "in this task); set exactlyOnce=false for at-least-once")
        return WriteScope(query, int(batch), ctx.partitionId())


QUERY_ID_KEY = "sql.streaming.queryId"  # Spark's task-local properties of a micro-batch
BATCH_ID_KEY = "streaming.sql.batchId"


def produce_exactly_once(options: SinkOptions, batches: Iterable[pa.RecordBatch], scope: WriteScope,
                         producer_factory: Callable[[dict[str, Any]], Any] | None = None,
                         consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> int:
    """Write a task's rows of one micro-batch so that, however often Spark runs it (task retries,
    a query restarted from its checkpoint), read_committed readers see them once.

    The transactional id is the query's and the task partition's, the same in every attempt: a new
    attempt's InitProducerId fences any older one still running and completes or aborts its open
    transaction. The rows go out in one transaction that also commits a progress mark, atomically:
    the offset batch_id + 1 of the group named like the transactional id, on partition 0 of the
    first row's topic. An attempt that finds the mark at or past its batch has nothing to do: that
    batch's rows of this partition are already committed. Returns the rows written (0 when skipped).
    Spark replays a micro-batch with the same offsets and, for the same plan, the same partitioning,
    which this relies on.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    ident = f"{options.transactional_id_prefix}{scope.query_id}-{scope.partition}"
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return 0  # nothing in this partition of the batch: nothing to mark either
    conf = producer_config(options)
    conf.update({"transactional.id": ident, "on_delivery": on_delivery})
    conf.pop("delivery.report.only.error", None)
    producer = (producer_factory or Producer)(conf)
    base = options.client.client_config()
    consumer = (consumer_factory or Consumer)({**base, "group.id": ident, "enable.auto.commit": False,
                                               "isolation.level": "read_committed"})
    try:
        producer.init_transactions(FLUSH_TIMEOUT_S)  # fences older attempts; their transaction ends first
        topic = options.topic or _first_topic(first)
        mark = TopicPartition(topic, 0)
        (done,) = consumer.committed([mark], timeout=FLUSH_TIMEOUT_S)
        if done.offset >= scope.batch_id + 1:
            return 0
        producer.begin_transaction()
        try:
            first_topic: list[str] = []
            count = _produce_rows(options, _chain(first, batches), producer, errors, first_topic)
            producer.flush(FLUSH_TIMEOUT_S)
            if errors:
                raise KafkaException(f"writing to strom failed: {'; '.join(errors)}")
            progress = TopicPartition(topic, 0, scope.batch_id + 1)
            producer.send_offsets_to_transaction([progress], consumer.consumer_group_metadata(), FLUSH_TIMEOUT_S)
            producer.commit_transaction(FLUSH_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(Exception):
                producer.abort_transaction(30)
            raise
        return count
    finally:
        consumer.close()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _first_topic(batch: pa.RecordBatch) -> str:
    topics = _column(batch, "topic") or [None]
    if topics[0] is None:
        raise SinkSchemaError("null topic present in the data; set the option 'topic' or fill the topic column")
    return str(topics[0])
