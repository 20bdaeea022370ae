"""The `strom` data source for PySpark: spark.read / readStream / df.write / writeStream.

Spark's Python Data Source API (pyspark >= 4.2). The driver plans offset ranges (a micro-batch's
offsets are the source's checkpointed progress); the executors read exactly those ranges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructField, StructType

from strom.spark import direct, fetch, planning, sink
from strom.spark.metadata import Metadata
from strom.spark.options import (
    PartitionOffsets,
    SinkOptions,
    SourceOptions,
    partition_offsets_from_dict,
    partition_offsets_to_json,
    sink_options,
    source_options,
    value_avro_options,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("strom.spark")

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def source_schema(include_headers: bool = False) -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = source_schema(options.include_headers)
    if [f.name for f in schema.fields] != [f.name for f in expected.fields]:
        raise ValueError(
            "the strom source has a fixed schema and does not take a user-specified one: "
            f"expected {expected.simpleString()}, got {schema.simpleString()}")


# --------------------------------------------------------------------------------------------------
# Reading


class RangePartition(InputPartition):
    """One Spark task: an exact offset range of one topic partition."""

    def __init__(self, r: planning.OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class _RangeReader:
    """What the batch and the stream reader share: options, lazily created clients, the executor read."""

    options: SourceOptions
    _metadata: Metadata | None
    _decoder: Any = None  # valueAvroSubject: a strom.spark.avro_codec.Decoder

    def _meta(self) -> Metadata:
        if self._metadata is None:
            self._metadata = Metadata(self.options)
        return self._metadata

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None  # clients are not shipped to executors
        return state

    def _plan(self, begin: PartitionOffsets, end: PartitionOffsets) -> list[InputPartition]:
        ranges = [planning.OffsetRange(t, p, begin[(t, p)], end[(t, p)]) for t, p in sorted(end)]
        pieces = planning.split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        r = getattr(partition, "range", None)
        if not isinstance(r, planning.OffsetRange):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        if self.options.arrow:
            batches = direct.read_range_any(self.options, r)
            if self._decoder is not None:  # valueAvroSubject: from_avro's decoding, in this worker
                from strom.spark.avro import decode_values

                return decode_values(batches, self._decoder)
            return batches
        return fetch.read_range_tuples(self.options, r)

    def _value_decoder(self, schema: StructType) -> Any:
        """valueAvroSubject: the Decoder of the subject's latest schema, which must still be the one
        the source's schema was typed with."""
        va = self.options.value_avro
        if va is None:
            return None
        from strom.spark.avro import decoded_type, value_decoder

        decoder = value_decoder(va.subject, va.registry, va.mode)
        if decoded_type(decoder) != schema["value"].dataType:
            raise ValueError(f"the latest schema of {va.subject} changed while the query was planned: run it again")
        return decoder


class StromBatchReader(_RangeReader, DataSourceReader):
    """spark.read: startingOffsets (default earliest) to endingOffsets (default latest), read once."""

    def __init__(self, options: SourceOptions, schema: StructType | None = None) -> None:
        self.options = options
        self._metadata = None
        self._decoder = self._value_decoder(schema) if schema is not None else None

    def partitions(self) -> Sequence[InputPartition]:  # type: ignore[override]
        meta = self._meta()
        tps = meta.partitions(self.options.subscription)
        begin = meta.resolve(self.options.starting, tps, option="startingOffsets",
                             no_match=self.options.timestamp_strategy)
        end = meta.resolve(self.options.ending, tps, option="endingOffsets", no_match="latest")
        for tp in tps:
            if end[tp] < begin[tp]:
                raise ValueError(
                    f"the starting offset {begin[tp]} of {tp[0]}-{tp[1]} is after its ending offset {end[tp]}; "
                    "check startingOffsets/endingOffsets (or their timestamp forms)")
        return self._plan(begin, end)


class StromStreamReader(_RangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: offsets are {"topic": {"partition": next offset}}, checkpointed by Spark."""

    def __init__(self, options: SourceOptions, schema: StructType | None = None) -> None:
        self.options = options
        self._metadata = None
        self._decoder = self._value_decoder(schema) if schema is not None else None
        self._target: PartitionOffsets | None = None   # Trigger.AvailableNow: where to stop
        self._latest: PartitionOffsets | None = None
        self._last_trigger = time.monotonic()

    def initialOffset(self) -> dict:
        meta = self._meta()
        tps = meta.partitions(self.options.subscription)
        offsets = meta.resolve(self.options.starting, tps, option="startingOffsets",
                               no_match=self.options.timestamp_strategy)
        return partition_offsets_to_json(offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        meta = self._meta()
        self._target = meta.latest(meta.partitions(self.options.subscription))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _begin(self, start: PartitionOffsets, tps: Sequence[tuple[str, int]]) -> PartitionOffsets:
        """Where each partition's next batch begins: new partitions start at their earliest offset."""
        new = [tp for tp in tps if tp not in start]
        begin = {tp: start[tp] for tp in tps if tp in start}
        if new:
            begin.update(self._meta().earliest(new))
        return begin

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # type: ignore[override]
        meta = self._meta()
        start_map = partition_offsets_from_dict(start)
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = meta.latest(meta.partitions(self.options.subscription))
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return partition_offsets_to_json(latest)
        begin = self._begin(start_map, list(latest))
        available = sum(max(0, latest[tp] - begin[tp]) for tp in latest)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.options.min_offsets_per_trigger
        if (min_rows is not None and self._target is None and available < min_rows
                and (time.monotonic() - self._last_trigger) * 1000 < self.options.max_trigger_delay_ms):
            return start  # wait for more data (minOffsetsPerTrigger, up to maxTriggerDelay)
        end = planning.rate_limit(limit.max_rows, begin, latest) if isinstance(limit, ReadMaxRows) else latest
        end_json = partition_offsets_to_json(end)
        if end_json != start:
            self._last_trigger = time.monotonic()
        return end_json

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else partition_offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start_map = partition_offsets_from_dict(start)
        end_map = partition_offsets_from_dict(end)
        fail = self.options.fail_on_data_loss
        gone = sorted(set(start_map) - set(end_map))
        if gone:
            fetch.data_loss(f"Partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone.", fail)
        new = [tp for tp in end_map if tp not in start_map]
        begin = dict(start_map)
        if new:
            earliest = self._meta().earliest(new)
            for tp in new:
                if earliest[tp] != 0:  # records were removed before this query saw the partition
                    fetch.data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {earliest[tp]} instead of 0.", fail)
            begin.update(earliest)
        for tp, until in list(end_map.items()):
            if until < begin[tp]:
                fetch.data_loss(f"Partition {tp[0]}-{tp[1]}'s offset went back from {begin[tp]} to {until} "
                                "(the topic was deleted and created again, or its log truncated).", fail)
                del end_map[tp]
        return self._plan(begin, end_map)

    def commit(self, end: dict) -> None:
        pass  # progress lives in Spark's checkpoint; nothing is committed to strom

    def stop(self) -> None:
        self._metadata = None


# --------------------------------------------------------------------------------------------------
# Writing


@dataclass
class WriteCount(WriterCommitMessage):
    records: int


class StromBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return WriteCount(sink.produce_batches(self.options, iterator))


class StromStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.exactly_once:
            return WriteCount(sink.produce_exactly_once(self.options, iterator, sink.WriteScope.of_this_task()))
        return WriteCount(sink.produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        pass  # every task committed its own transaction (or, at-least-once, had its records acknowledged)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        # exactlyOnce: the tasks that committed left a progress mark, so the batch's retry skips them.
        pass  # at-least-once: records already produced stay (like Spark's Kafka sink)


# --------------------------------------------------------------------------------------------------


class StromDataSource(DataSource):
    """Format "strom": Spark's Kafka source and sink, for strom (or any Kafka-compatible broker)."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:  # type: ignore[override]
        schema = source_schema(_include_headers(self.options))
        va = value_avro_options(self.options or {})
        if va is not None:  # valueAvroSubject: value typed by the subject's latest schema
            from strom.spark.avro import decoded_type, value_decoder

            fields = [StructField("value", decoded_type(value_decoder(va.subject, va.registry)), True)
                      if f.name == "value" else f for f in schema.fields]
            schema = StructType(fields)
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        options = source_options(self.options, streaming=False)
        _check_schema(schema, options)
        return StromBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = source_options(self.options, streaming=True)
        _check_schema(schema, options)
        return StromStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:  # type: ignore[override]
        _append_only(overwrite)
        options = sink_options(self.options)
        sink.check_sink_schema(schema, options)
        return StromBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:  # type: ignore[override]
        # Every output mode appends to the topic (complete mode writes the whole result each trigger).
        options = sink_options(self.options, streaming=True)
        sink.check_sink_schema(schema, options)
        return StromStreamWriter(options)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("strom topics are append-only: write with mode('append'), not overwrite")


def _include_headers(options: Any) -> bool:
    value = options.get("includeheaders") if options is not None else None
    return str(value).strip().lower() == "true" if value is not None else False
