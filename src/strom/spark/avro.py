"""Typed records in Spark: Confluent-framed Avro <-> struct columns, with schemas from a registry.

    from strom.spark import from_avro, to_avro

    events = df.select(from_avro("value", subject="trucks-value", registry_url="http://127.0.0.1:8081")
                       .alias("e")).select("e.*")
    out = events.select(to_avro(F.struct("*"), subject="alerts-value", registry_url=...).alias("value"))

from_avro: the struct type is the subject's latest schema when the column is defined (on the
driver); each record's own schema id picks its writer schema, and Avro's resolution rules bring the
record to the latest schema's shape. Schemas with references (named types of other subjects, as
AvroSerializer registers them) are followed.

Two ways to decode, the same answers:
- in the JVM (where the session has strom's jar, strom.spark.jvm): a Java UDF decodes each value
  with Apache Avro's GenericDatumReader(writer, reader); the subject's versions are passed to it
  from the driver, an id it was not given (registered later) is fetched by each executor JVM once.
  No Python worker and no Python object take part.
- otherwise an Arrow UDF: Spark hands it Arrow batches, decoded a batch at a time
  (strom.spark.avro_codec); writer schemas are fetched once per id by each Python worker.

to_avro: the subject's latest schema and id, an Arrow UDF.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa  # the UDFs' type hints are read at run time: pa must be a global here

from strom.spark import jvm
from strom.spark.avro_codec import (
    FAILFAST,
    PERMISSIVE,
    Decoder,
    Encoder,
    SchemaSource,
    expanded,
    parse,
    standalone,
)
from strom.spark.avro_types import spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession
    from pyspark.sql.types import DataType


def client_config(registry_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """SchemaRegistryClient settings: the url, and e.g. basic.auth.user.info, ssl.ca.location."""
    return {**dict(extra or {}), "url": registry_url}


def latest(subject: str, config: Mapping[str, str]) -> tuple[str, int]:
    """(schema text, id) of the subject's latest version; the text is self-contained (its
    references' named types written out, strom.spark.avro_codec.standalone)."""
    client = SchemaSource(config).client()
    registered = client.get_latest_version(subject)
    schema = registered.schema
    if schema.schema_type not in (None, "AVRO"):
        raise ValueError(f"the latest schema of {subject} is {schema.schema_type}, not Avro")
    return json.dumps(standalone(client, schema)), int(registered.schema_id)


def versions(subject: str, config: Mapping[str, str]) -> dict[int, str]:
    """Schema id -> self-contained text of every Avro version of the subject (not deleted)."""
    client = SchemaSource(config).client()
    out: dict[int, str] = {}
    for version in client.get_versions(subject):
        registered = client.get_version(subject, version)
        if registered.schema.schema_type in (None, "AVRO"):
            out[int(registered.schema_id)] = json.dumps(standalone(client, registered.schema))
    return out


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


ENGINES = ("auto", "jvm", "arrow")


def from_avro(col: Column | str, subject: str, registry_url: str, *, mode: str = FAILFAST,
              registry_config: Mapping[str, str] | None = None, engine: str = "auto") -> Column:
    """A struct column decoded from Confluent-framed Avro values, typed by the subject's latest schema.

    ``mode``: FAILFAST (the default, as in Spark's from_avro) fails the task at a value that is not
    framed Avro of a schema the registry has; PERMISSIVE makes such values null. A null value gives
    a null struct. ``registry_config``: more SchemaRegistryClient settings (TLS, basic auth).
    ``engine``: "jvm" decodes in the JVM (strom's jar must be on the active session's classpath),
    "arrow" in an Arrow UDF; "auto" (the default) takes the JVM where it can: a classic session with
    the jar, and no ssl.* registry settings (the JVM fetches a schema id it was not given itself,
    with basic auth but without the client's TLS files).
    """
    mode = mode.upper()
    if mode not in (FAILFAST, PERMISSIVE):
        raise ValueError(f"mode must be FAILFAST or PERMISSIVE, not {mode}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine}")
    config = client_config(registry_url, registry_config)
    text, schema_id = latest(subject, config)
    result_type = spark_type(expanded(parse(text)))
    if engine != "arrow":
        spark = _jvm_session(config)
        if spark is not None:
            from pyspark.sql.functions import call_function

            name = jvm.register_avro_decode(spark, result_type, schema_id, text, versions(subject, config),
                                            config["url"], jvm.authorization(config), mode == PERMISSIVE)
            return call_function(name, col)
        if engine == "jvm":
            raise ValueError(f"from_avro(engine='jvm') needs a classic Spark session with strom's jar "
                             f"({jvm.jar_path() or 'build/jvm/strom-spark.jar: make jvm'}) on spark.jars")
    from pyspark.sql.functions import arrow_udf

    decoder = Decoder(text, schema_id, SchemaSource(config).writer, mode)

    def decode(values: pa.Array) -> pa.Array:
        return decoder.decode(values)

    return arrow_udf(decode, result_type)(col)  # type: ignore[call-overload,no-any-return]


def _jvm_session(config: Mapping[str, str]) -> SparkSession | None:
    """The active session, if from_avro can decode in its JVM."""
    if any(k.startswith("ssl.") for k in config):
        return None
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    return spark if spark is not None and jvm.has_class(spark, jvm.AVRO_DECODE) else None


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
