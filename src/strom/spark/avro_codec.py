"""Confluent-framed Avro to and from Arrow arrays, a batch at a time (no Spark here).

The Confluent wire format: magic byte 0, the writer schema's id as 4 big-endian bytes, then the
Avro binary encoding of the record. Decoding a batch:

1. numpy reads every value's frame at once (magic byte, schema id, where the body starts and ends);
2. per writer schema id, the bodies are gathered into one Avro object container block (the header
   with the writer schema is made once per id by fastavro's own writer);
3. a record written with the reader schema itself (the usual case: the latest schema's id) needs no
   resolution: polars' Avro reader (compiled, columnar) decodes the block straight into Arrow
   columns, about 15 times faster than fastavro, with no Python object per record or field. polars
   maps no Avro map type, so a schema with maps (or one polars refuses, or whose columns do not
   come out as the reader's Arrow type) is decided once to take the next path;
4. otherwise fastavro's container reader decodes the block with the reader schema: schema
   resolution is fastavro's (a field the writer lacks gets the reader's default, promotions,
   aliases), decoding runs in its compiled block loop, and pyarrow builds the struct column from
   the records (pyarrow.array, in C++).

Writer schemas are fetched once per id and process (an executor's Python worker) through
confluent-kafka's SchemaRegistryClient, and kept.

A block is decoded as a whole, so a body that is not exactly one record of its writer schema
(trailing bytes, a wrong id) can throw the records after it in the same block off their frames:
the error names the schema id. In PERMISSIVE mode a block that fails is decoded again record by
record (fastavro's schemaless_reader), so only the bad records become null.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from strom.spark.avro_types import arrow_type, has_maps, python_value

MAGIC = 0
HEADER = 5  # magic byte + 4-byte schema id
SYNC = b"strom-avro-block"  # 16 bytes: the container's sync marker
FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"


class AvroDecodeError(ValueError):
    """A value that is not Confluent-framed Avro of a known schema (FAILFAST mode)."""


def parse(text: str | dict[str, Any]) -> Any:
    """A schema (JSON text or already loaded) parsed by fastavro."""
    import json

    loaded = json.loads(text) if isinstance(text, str) else text
    return fastavro.parse_schema(loaded, _write_hint=False)


def expanded(parsed: Any) -> Any:
    """The schema with named types written out where they are used (for the type mapping)."""
    return fastavro.parse_schema(parsed, expand=True, _write_hint=False)


def _avro_long(n: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, "long", n)
    return buf.getvalue()


CONTAINER_HEADER = parse({"type": "record", "name": "org.apache.avro.file.Header", "fields": [
    {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4}},
    {"name": "meta", "type": {"type": "map", "values": "bytes"}},
    {"name": "sync", "type": {"type": "fixed", "name": "Sync", "size": 16}}]})


def container_header(schema: Any) -> bytes:
    """The header of an Avro object container file (the spec's own schema for it) holding
    ``schema``, uncompressed blocks and SYNC as the sync marker."""
    import json

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, CONTAINER_HEADER, {
        "magic": b"Obj\x01", "sync": SYNC,
        "meta": {"avro.schema": json.dumps(schema, separators=(",", ":")).encode(), "avro.codec": b"null"}})
    return buf.getvalue()


def frame(schema_id: int) -> bytes:
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big")


# --------------------------------------------------------------------------------------------------
# Schemas by id, per process


class SchemaSource:
    """Writer schemas by id from a registry (url + SchemaRegistryClient settings), cached for the life
    of the process: a Python worker decodes many batches, and an id's schema never changes."""

    _cache: dict[tuple[str, int], Any] = {}
    _clients: dict[tuple[tuple[str, str], ...], Any] = {}
    _lock = threading.Lock()

    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)
        self._key = tuple(sorted(self.config.items()))

    def client(self) -> Any:
        with self._lock:
            c = self._clients.get(self._key)
            if c is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient

                c = self._clients[self._key] = SchemaRegistryClient(dict(self.config))
            return c

    def writer(self, schema_id: int) -> Any:
        key = (self.config["url"], schema_id)
        found = self._cache.get(key)
        if found is None:
            try:
                schema = self.client().get_schema(schema_id)
            except Exception as e:
                raise AvroDecodeError(f"schema id {schema_id} could not be read from the registry at "
                                      f"{self.config['url']}: {e}") from None
            if schema.schema_type not in (None, "AVRO"):
                raise AvroDecodeError(f"schema id {schema_id} is a {schema.schema_type} schema, not Avro")
            try:
                found = self._cache[key] = parse(standalone(self.client(), schema))
            except Exception as e:
                raise AvroDecodeError(f"the references of schema id {schema_id} could not be followed: {e}") from None
        return found


def standalone(client: Any, schema: Any) -> Any:
    """A registered schema (confluent-kafka's Schema) as one self-contained Avro schema: the named
    types of its references (other subjects' versions, as AvroSerializer registers them; followed
    depth first) written out where the schema first uses them, by name after that."""
    import json

    named: dict[str, Any] = {}
    seen: set[tuple[str, int]] = set()

    def load(references: Any) -> None:
        for ref in references or ():
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            referenced = client.get_version(ref.subject, ref.version).schema
            load(referenced.references)
            fastavro.parse_schema(json.loads(referenced.schema_str), named_schemas=named, _write_hint=False)

    load(schema.references)
    main = fastavro.parse_schema(json.loads(schema.schema_str), named_schemas=named, _write_hint=False)
    if not schema.references:
        return main
    defined: set[str] = set()

    def inline(s: Any) -> Any:
        if isinstance(s, str):
            if s in named and s not in defined:
                return inline(named[s])
            return s
        if isinstance(s, list):
            return [inline(b) for b in s]
        if not isinstance(s, dict):
            return s
        out = dict(s)
        if "name" in s and s.get("type") in ("record", "error", "enum", "fixed"):
            defined.add(s["name"])
        if "fields" in s:
            out["fields"] = [{**f, "type": inline(f["type"])} for f in s["fields"]]
        for key in ("items", "values"):
            if key in s:
                out[key] = inline(s[key])
        if isinstance(s.get("type"), (dict, list)):
            out["type"] = inline(s["type"])
        return out

    return inline(main)


# --------------------------------------------------------------------------------------------------
# Decoding


@dataclass
class Decoder:
    """Decodes binary arrays of Confluent-framed Avro into struct arrays of the reader schema."""

    reader_text: str
    reader_id: int
    writers: Callable[[int], Any]  # schema id -> parsed writer schema
    mode: str = FAILFAST
    _reader: Any = field(default=None, init=False, repr=False)
    _type: pa.DataType | None = field(default=None, init=False, repr=False)
    _headers: dict[int, bytes] = field(default_factory=dict, init=False, repr=False)
    _columnar: bool | None = field(default=None, init=False, repr=False)  # polars reads the reader schema

    def __getstate__(self) -> dict[str, Any]:
        return {"reader_text": self.reader_text, "reader_id": self.reader_id, "writers": self.writers,
                "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def reader(self) -> Any:
        if self._reader is None:
            self._reader = parse(self.reader_text)
        return self._reader

    @property
    def type(self) -> pa.DataType:
        if self._type is None:
            self._type = arrow_type(expanded(self.reader), loose=True)
        return self._type

    def _header(self, schema_id: int, writer: Any, expand: bool = False) -> bytes:
        """An object container file's header with the writer schema; ``expand``: with named types
        written out where they are used (polars does not follow a reference to a named type;
        fastavro refuses a named type defined twice)."""
        h = self._headers.get(schema_id if not expand else -1 - schema_id)
        if h is None:
            h = container_header(expanded(writer) if expand else writer)
            self._headers[schema_id if not expand else -1 - schema_id] = h
        return h

    def decode(self, values: pa.Array) -> pa.Array:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        n = len(values)
        struct_type = self.type
        if n == 0:
            return pa.array([], type=struct_type)
        starts, ends, data = _frames(values)
        valid = values.is_valid().to_numpy(zero_copy_only=False) if values.null_count else np.ones(n, bool)
        framed = valid & (ends - starts >= HEADER)
        ids = np.full(n, -1, np.int64)
        at = starts[framed]
        if len(at):
            magic_ok = data[at] == MAGIC
            ids[framed] = np.where(magic_ok, (data[at + 1].astype(np.int64) << 24) | (data[at + 2].astype(np.int64) << 16)
                                   | (data[at + 3].astype(np.int64) << 8) | data[at + 4].astype(np.int64), -1)
        bad = valid & (ids < 0)
        if bad.any() and self.mode != PERMISSIVE:
            i = int(np.flatnonzero(bad)[0])
            raise AvroDecodeError(f"value {i} of the batch is not Confluent-framed Avro (magic byte 0, "
                                  "4-byte schema id, body)")
        pieces: list[pa.Array] = []
        index = np.full(n, -1, np.int64)
        placed = 0
        known = ids[ids >= 0]
        unique = [int(known[0])] if len(known) and known.min() == known.max() else np.unique(known).tolist()
        for schema_id in unique:
            rows = np.flatnonzero(ids == schema_id)
            records = self._decode_id(int(schema_id), starts[rows] + HEADER, ends[rows], data)
            pieces.append(records if isinstance(records, pa.Array) else pa.array(records, type=struct_type))
            index[rows] = np.arange(placed, placed + len(rows))
            placed += len(rows)
        if len(pieces) == 1 and placed == n and pieces[0].null_count == 0:
            return pieces[0]  # one writer schema, no nulls: already in order
        whole = pa.concat_arrays(pieces) if pieces else pa.array([], type=struct_type)
        return whole.take(pa.array(index, mask=index < 0))

    def _decode_id(self, schema_id: int, body_starts: np.ndarray, body_ends: np.ndarray,
                   data: np.ndarray) -> pa.Array | list[Any]:
        try:  # the reader schema itself is at hand: only older ids are asked of the registry
            writer = self.reader if schema_id == self.reader_id else self.writers(schema_id)
        except AvroDecodeError:
            if self.mode == PERMISSIVE:
                return [None] * len(body_starts)
            raise
        bodies = _gather(data, body_starts, body_ends)
        reader = None if schema_id == self.reader_id else self.reader
        block = b"".join((_avro_long(len(body_starts)), _avro_long(len(bodies)), bodies, SYNC))
        if reader is None and self._columnar is not False:
            columns = self._polars(self._header(schema_id, writer, expand=True) + block, len(body_starts))
            if columns is not None:
                return columns
        block = self._header(schema_id, writer) + block
        try:
            out = list(fastavro.reader(io.BytesIO(block), reader_schema=reader))
            if len(out) == len(body_starts):
                return out
            problem: Exception = ValueError(f"{len(out)} records decoded of {len(body_starts)}")
        except Exception as e:  # fastavro's errors: EOFError, SchemaResolutionError, ValueError, ...
            problem = e
        if self.mode != PERMISSIVE:
            raise AvroDecodeError(f"values written with schema id {schema_id} do not decode: {problem}") from None
        return [self._one(writer, reader, bytes(data[s:e])) for s, e in zip(body_starts.tolist(), body_ends.tolist(), strict=True)]

    def _polars(self, block: bytes, n: int) -> pa.Array | None:
        """The block decoded by polars as a struct array of the reader's type, or None (and
        polars is not asked again for this reader) when polars cannot read the schema."""
        # A Spark task has one core: polars' thread pool (one thread per core by default, made at its
        # import) would compete with the executor's other tasks.
        os.environ.setdefault("POLARS_MAX_THREADS", "1")
        try:
            import polars
        except ImportError:
            self._columnar = False
            return None
        try:
            table = polars.read_avro(io.BytesIO(block)).to_arrow()
            fields = list(self.type)
            if table.num_rows != n or table.column_names != [f.name for f in fields]:
                raise ValueError("polars gave other columns")
            columns = [table.column(i).combine_chunks().cast(f.type) for i, f in enumerate(fields)]
            out = pa.StructArray.from_arrays(columns, fields=fields)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # polars' errors, and its PanicException (a BaseException) for what it lacks
            if self._columnar is None:
                self._columnar = False  # never read this schema: fastavro from now on
            return None  # bad records in a block polars read before: fastavro says which, by the mode
        self._columnar = True
        return out

    @staticmethod
    def _one(writer: Any, reader: Any, body: bytes) -> Any:
        try:
            return fastavro.schemaless_reader(io.BytesIO(body), writer, reader)
        except Exception:
            return None


def _frames(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end) of every value in the data buffer, and the buffer as uint8 (not copied)."""
    large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)[values.offset:values.offset + len(values) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    offsets = offsets.astype(np.int64)
    return offsets[:-1], offsets[1:], data


def _gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """The bytes of data[starts[i]:ends[i]] for every i (ascending, not overlapping), one after the
    other: one boolean mask over the span they cover (+1 where a range starts, -1 where it ends,
    summed up), no index per byte."""
    if not len(starts):
        return b""
    first, last = int(starts[0]), int(ends[-1])
    delta = np.zeros(last - first + 1, np.int8)
    delta[starts - first] += 1
    delta[ends - first] -= 1
    return data[first:last][np.cumsum(delta[:-1], dtype=np.int8) > 0].tobytes()


# --------------------------------------------------------------------------------------------------
# Encoding


@dataclass
class Encoder:
    """Encodes struct arrays as Confluent-framed Avro binary values with one schema id."""

    schema_text: str
    schema_id: int
    _schema: Any = field(default=None, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"schema_text": self.schema_text, "schema_id": self.schema_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def schema(self) -> Any:
        if self._schema is None:
            self._schema = parse(self.schema_text)
        return self._schema

    def encode(self, rows: pa.Array) -> pa.Array:
        if isinstance(rows, pa.ChunkedArray):
            rows = rows.combine_chunks()
        n = len(rows)
        schema = self.schema
        prefix = frame(self.schema_id)
        full = expanded(schema)
        fix_maps = has_maps(full)
        buf = io.BytesIO()
        offsets = np.zeros(n + 1, np.int32)
        valid = np.ones(n, bool)
        for i, row in enumerate(rows.to_pylist()):
            if row is None:
                valid[i] = False
            else:
                buf.write(prefix)
                fastavro.schemaless_writer(buf, schema, python_value(full, row) if fix_maps else row)
            offsets[i + 1] = buf.tell()
        nulls = n - int(valid.sum())
        bitmap = pa.array(valid).buffers()[1] if nulls else None
        return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(buf.getvalue())],
                                     null_count=nulls)
