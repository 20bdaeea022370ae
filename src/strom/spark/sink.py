"""Executor side of the sink: produce the rows of a DataFrame (Arrow batches) to strom.

Columns, as in Spark's Kafka sink: value (binary or string, required), key (binary or string),
topic (string; the 'topic' option overrides it), partition (int), headers
(array<struct<key: string, value: binary>>). Other columns are ignored. Delivery is
at-least-once, as with Spark's Kafka sink: a task that fails after producing is retried whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    if "headers" in fields:
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
    count = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _column(batch, "value") or [None] * n
        keys = _column(batch, "key") or [None] * n
        topics = [options.topic] * n if options.topic else (_column(batch, "topic") or [None] * n)
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise SinkSchemaError("null topic present in the data; set the option 'topic' or fill the topic column")
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
                    producer.poll(0.05)  # the local queue is full: serve deliveries, then retry
            if errors:
                break
        count += n
        producer.poll(0)
        if errors:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise KafkaException(f"writing to strom failed: {'; '.join(errors)}")
    if remaining:
        raise KafkaException(f"writing to strom failed: {remaining} records not acknowledged within {FLUSH_TIMEOUT_S}s")
    return count
