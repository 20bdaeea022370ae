"""Typed records in Spark: Confluent-framed Avro <-> struct columns, with schemas from a registry.

    from strom.spark import from_avro, to_avro

    events = df.select(from_avro("value", subject="trucks-value", registry_url="http://127.0.0.1:8081")
                       .alias("e")).select("e.*")
    out = events.select(to_avro(F.struct("*"), subject="alerts-value", registry_url=...).alias("value"))

from_avro: the struct type is the subject's latest schema when the column is defined (on the
driver); each record's own schema id picks its writer schema, fetched once per id by each executor
process, and Avro's resolution rules bring the record to the latest schema's shape. to_avro: the
subject's latest schema and id. Both are Arrow UDFs: Spark hands them Arrow batches, which are
decoded or encoded a batch at a time (strom.spark.avro_codec).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa  # the UDFs' type hints are read at run time: pa must be a global here

from strom.spark.avro_codec import FAILFAST, PERMISSIVE, Decoder, Encoder, SchemaSource, expanded, parse
from strom.spark.avro_types import spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType


def client_config(registry_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """SchemaRegistryClient settings: the url, and e.g. basic.auth.user.info, ssl.ca.location."""
    return {**dict(extra or {}), "url": registry_url}


def latest(subject: str, config: Mapping[str, str]) -> tuple[str, int]:
    """(schema text, id) of the subject's latest version."""
    registered = SchemaSource(config).client().get_latest_version(subject)
    schema = registered.schema
    if schema.schema_type not in (None, "AVRO"):
        raise ValueError(f"the latest schema of {subject} is {schema.schema_type}, not Avro")
    if schema.references:
        raise ValueError(f"the latest schema of {subject} has references, which strom's from_avro and to_avro "
                         "do not follow")
    return schema.schema_str, int(registered.schema_id)


def value_decoder(subject: str, config: Mapping[str, str], mode: str = FAILFAST) -> Decoder:
    """A Decoder for a subject's latest schema (the strom source's valueAvroSubject option)."""
    text, schema_id = latest(subject, config)
    return Decoder(text, schema_id, SchemaSource(config).writer, mode)


def decoded_type(decoder: Decoder) -> DataType:
    return spark_type(expanded(decoder.reader))


def decode_values(batches: Iterator[pa.RecordBatch], decoder: Decoder) -> Iterator[pa.RecordBatch]:
    """The source's Arrow batches with the value column decoded into the reader schema's struct."""
    for batch in batches:
        i = batch.schema.get_field_index("value")
        decoded = decoder.decode(batch.column(i))
        columns = list(batch.columns)
        columns[i] = decoded
        fields = list(batch.schema)
        fields[i] = pa.field("value", decoded.type)
        yield pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def from_avro(col: Column | str, subject: str, registry_url: str, *, mode: str = FAILFAST,
              registry_config: Mapping[str, str] | None = None) -> Column:
    """A struct column decoded from Confluent-framed Avro values, typed by the subject's latest schema.

    ``mode``: FAILFAST (the default, as in Spark's from_avro) fails the task at a value that is not
    framed Avro of a schema the registry has; PERMISSIVE makes such values null. A null value gives
    a null struct. ``registry_config``: more SchemaRegistryClient settings (TLS, basic auth).
    """
    from pyspark.sql.functions import arrow_udf

    mode = mode.upper()
    if mode not in (FAILFAST, PERMISSIVE):
        raise ValueError(f"mode must be FAILFAST or PERMISSIVE, not {mode}")
    config = client_config(registry_url, registry_config)
    text, schema_id = latest(subject, config)
    result_type = spark_type(expanded(parse(text)))
    decoder = Decoder(text, schema_id, SchemaSource(config).writer, mode)

    def decode(values: pa.Array) -> pa.Array:
        return decoder.decode(values)

    return arrow_udf(decode, result_type)(col)  # type: ignore[call-overload,no-any-return]


def to_avro(col: Column | str, subject: str, registry_url: str, *,
            registry_config: Mapping[str, str] | None = None) -> Column:
    """A binary column of Confluent-framed Avro (the subject's latest schema and id) from a struct
    column whose fields are the schema's (by name). A null struct gives a null value."""
    from pyspark.sql.functions import arrow_udf

    text, schema_id = latest(subject, client_config(registry_url, registry_config))
    encoder = Encoder(text, schema_id)

    def encode(rows: pa.Array) -> pa.Array:
        return encoder.encode(rows)

    return arrow_udf(encode, "binary")(col)  # type: ignore[call-overload,no-any-return]
