"""strom.spark.avro_codec without Spark: Confluent-framed Avro batches to Arrow struct arrays and
back; polars' columnar path and fastavro's path give the same columns; resolution of older writer
schemas; framing errors by mode."""

from __future__ import annotations

import datetime
import decimal
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from strom.spark.avro_codec import AvroDecodeError, Decoder, Encoder, frame, parse
from strom.spark.avro_types import UnsupportedAvroType, arrow_type

pytestmark = pytest.mark.timeout(60)

EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "t",
    "fields": [
        {"name": "l", "type": "long"}, {"name": "i", "type": "int"}, {"name": "d", "type": "double"},
        {"name": "f", "type": "float"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "place", "type": {"type": "record", "name": "Place", "fields": [{"name": "city", "type": "string"}]}},
        {"name": "more", "type": {"type": "array", "items": "Place"}},
        {"name": "maybe", "type": ["null", "Place"], "default": None},
        {"name": "later", "type": ["long", "null"]},
    ],
}
WITH_MAP = {"type": "record", "name": "M", "fields": [
    {"name": "id", "type": "long"}, {"name": "m", "type": {"type": "map", "values": ["null", "double"]}}]}


def every(i: int) -> dict[str, Any]:
    return {
        "l": -(2**40) + i, "i": i, "d": i / 3, "f": 0.5 * i, "b": i % 2 == 0, "s": f"é{i}", "raw": bytes([i % 256]) * 3,
        "kind": "AB"[i % 2], "fx": i.to_bytes(4, "big"),
        "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=i),
        "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=i), "price": decimal.Decimal(i) / 100,
        "place": {"city": f"c{i}"}, "more": [{"city": f"m{j}"} for j in range(i % 3)],
        "maybe": None if i % 2 else {"city": "x"}, "later": None if i % 3 else i,
    }


def framed(schema: dict[str, Any], schema_id: int, records: list[dict[str, Any] | None]) -> pa.Array:
    """Values as confluent-kafka's AvroSerializer frames them (fastavro's schemaless_writer)."""
    parsed = parse(json.dumps(schema))
    out: list[bytes | None] = []
    for r in records:
        if r is None:
            out.append(None)
            continue
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        out.append(frame(schema_id) + buf.getvalue())
    return pa.array(out, pa.binary())


def decoder(reader: dict[str, Any], reader_id: int, writers: dict[int, dict[str, Any]], mode: str = "FAILFAST",
            columnar: bool = True) -> Decoder:
    parsed = {i: parse(json.dumps(s)) for i, s in writers.items()}

    def writer(i: int) -> Any:
        if i not in parsed:
            raise AvroDecodeError(f"schema id {i} not found")
        return parsed[i]

    d = Decoder(json.dumps(reader), reader_id, writer, mode)
    if not columnar:
        d._columnar = False
    return d


@pytest.mark.parametrize("schema", [EVERYTHING, WITH_MAP], ids=["everything", "map"])
def test_both_paths_give_the_records(schema: dict[str, Any]) -> None:
    records = ([every(i) for i in range(50)] if schema is EVERYTHING
               else [{"id": i, "m": {"a": float(i), "b": None}} for i in range(50)])
    values = framed(schema, 7, [*records[:20], None, *records[20:]])
    want = pa.array([*records[:20], None, *records[20:]], type=arrow_type(_expanded(schema), loose=True))
    columnar = decoder(schema, 7, {7: schema})
    got_columnar = columnar.decode(values)
    got_fastavro = decoder(schema, 7, {7: schema}, columnar=False).decode(values)
    assert got_fastavro.type == want.type and got_fastavro.to_pylist() == want.to_pylist()
    assert got_columnar.type == want.type and got_columnar.to_pylist() == want.to_pylist()
    assert columnar._columnar is (schema is EVERYTHING)  # polars maps no Avro map: fastavro reads that one
    # a slice (an Arrow array offset), as Spark may hand one
    assert columnar.decode(values.slice(5, 10)).to_pylist() == want.slice(5, 10).to_pylist()


def _expanded(schema: dict[str, Any]) -> Any:
    from strom.spark.avro_codec import expanded

    return expanded(parse(json.dumps(schema)))


def test_older_writers_resolved_to_the_reader() -> None:
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "gone", "type": "string"}]}
    v2 = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": "dflt"},
        {"name": "c", "type": ["null", "int"], "default": None}]}
    old = framed(v1, 1, [{"a": 1, "gone": "x"}, {"a": 2, "gone": "y"}])
    new = framed(v2, 2, [{"a": 2**40, "b": "given", "c": 3}])
    mixed = pa.concat_arrays([old.slice(0, 1), new, old.slice(1, 1)])
    got = decoder(v2, 2, {1: v1, 2: v2}).decode(mixed)
    assert got.to_pylist() == [{"a": 1, "b": "dflt", "c": None}, {"a": 2**40, "b": "given", "c": 3},
                               {"a": 2, "b": "dflt", "c": None}]


def test_framing_errors_by_mode() -> None:
    schema = {"type": "record", "name": "T", "fields": [{"name": "n", "type": "long"}]}
    good = framed(schema, 3, [{"n": 1}, {"n": 2}])
    bad_values = [b"{json", b"\x00\x00", frame(99) + b"\x02", frame(3) + b"\x80"]  # no magic, short, unknown id, cut
    values = pa.array([good[0].as_py(), *bad_values, good[1].as_py()], pa.binary())
    permissive = decoder(schema, 3, {3: schema}, mode="PERMISSIVE").decode(values)
    assert permissive.to_pylist() == [{"n": 1}, None, None, None, None, {"n": 2}]
    for bad in bad_values:
        with pytest.raises(AvroDecodeError):
            decoder(schema, 3, {3: schema}).decode(pa.array([good[0].as_py(), bad], pa.binary()))


def test_encoder_output_is_what_fastavro_reads() -> None:
    rows = pa.array([{"id": 1, "m": {"a": 1.0}}, None, {"id": 2, "m": {}}], type=arrow_type(_expanded(WITH_MAP)))
    values = Encoder(json.dumps(WITH_MAP), 12).encode(rows)
    assert values.is_null().to_pylist() == [False, True, False]
    parsed = parse(json.dumps(WITH_MAP))
    back = []
    for v in values.to_pylist():
        if v is not None:
            assert v[:5] == frame(12)
            back.append(fastavro.schemaless_reader(io.BytesIO(v[5:]), parsed, None))
    assert back == [{"id": 1, "m": {"a": 1.0}}, {"id": 2, "m": {}}]


def test_unsupported_types_refused_up_front() -> None:
    with pytest.raises(UnsupportedAvroType, match="union"):
        arrow_type(parse(json.dumps({"type": "record", "name": "U", "fields": [
            {"name": "x", "type": ["int", "string"]}]})))
    with pytest.raises(UnsupportedAvroType, match="uuid"):
        arrow_type(parse(json.dumps({"type": "record", "name": "U", "fields": [
            {"name": "x", "type": {"type": "string", "logicalType": "uuid"}}]})))
