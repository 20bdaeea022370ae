"""Avro schemas as Arrow and Spark types, the way Spark's own from_avro maps them.

| Avro | Arrow | Spark |
|---|---|---|
| boolean, int, long, float, double | bool, int32, int64, float32, float64 | boolean, int, bigint, float, double |
| string, enum | string | string |
| bytes, fixed | binary | binary |
| record | struct (fields in schema order) | struct |
| array | list | array |
| map | map<string, T> | map<string, T> |
| ["null", T] (either order) | T | T |
| timestamp-millis, timestamp-micros | timestamp[us, UTC] | timestamp |
| date | date32 | date |
| decimal (bytes or fixed) | decimal128(precision, scale) | decimal(precision, scale) |

Every field of the struct, and every element and map value, is nullable in the column's type (in
the values only ["null", T] fields and null input values give nulls). Anything else (other unions, the time-* and uuid logical types) is refused with UnsupportedAvroType
when the column is defined, not when a task meets a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType


class UnsupportedAvroType(ValueError):
    """An Avro type that from_avro/to_avro do not map to a Spark type."""


PRIMITIVES = {"boolean": "bool_", "int": "int32", "long": "int64", "float": "float32", "double": "float64",
              "string": "string", "bytes": "binary"}


def arrow_type(schema: Any, loose: bool = False) -> pa.DataType:
    """The Arrow type of a parsed (fastavro.parse_schema) Avro schema; nullability is the fields'
    (``loose``: every field nullable, as a struct array's children are under a null struct)."""
    t, _ = _arrow(schema, "value")
    return _loosen(t) if loose else t


def _loosen(t: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _loosen(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field(t.item_field.name, _loosen(t.item_type)))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _loosen(t.value_type)))
    return t


def _arrow(schema: Any, where: str) -> tuple[pa.DataType, bool]:
    """(type, nullable) of one schema; ``where`` names it in errors."""
    import pyarrow as pa

    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1 and len(schema) == 2:
            t, _ = _arrow(branches[0], where)
            return t, True
        raise UnsupportedAvroType(f"{where}: the union {_name(schema)} is not supported (only [\"null\", T])")
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return getattr(pa, PRIMITIVES[schema])(), False
        if schema == "null":
            return pa.null(), True
        raise UnsupportedAvroType(f"{where}: unknown type {schema!r}")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC"), False
    if logical == "date" and kind == "int":
        return pa.date32(), False
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0))), False
    if logical is not None and kind in PRIMITIVES | {"fixed": ""}:
        raise UnsupportedAvroType(f"{where}: the logical type {logical} is not supported")
    if kind in PRIMITIVES:
        return getattr(pa, PRIMITIVES[kind])(), False
    if kind == "record" or kind == "error":
        fields = []
        for f in schema["fields"]:
            t, nullable = _arrow(f["type"], f"{where}.{f['name']}")
            fields.append(pa.field(f["name"], t, nullable=nullable))
        return pa.struct(fields), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    if kind == "array":
        t, nullable = _arrow(schema["items"], f"{where}[]")
        return pa.list_(pa.field("element", t, nullable=nullable)), False
    if kind == "map":
        t, nullable = _arrow(schema["values"], f"{where}{{}}")
        return pa.map_(pa.string(), pa.field("value", t, nullable=nullable)), False
    raise UnsupportedAvroType(f"{where}: the type {kind!r} is not supported")


def _name(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_name(b) for b in schema) + "]"
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


def spark_type(schema: Any) -> DataType:
    """The Spark type of a parsed Avro schema (a record: a StructType, fields in schema order).
    Every field is nullable (a null struct's fields are null; Spark checks the Arrow batches a UDF
    returns against this type, nullability included)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    at = arrow_type(schema, loose=True)

    def convert(t: pa.DataType) -> DataType:
        import pyarrow as pa

        if pa.types.is_struct(t):
            return StructType([StructField(f.name, convert(f.type), f.nullable) for f in t])
        if pa.types.is_map(t):
            return MapType(convert(t.key_type), convert(t.item_type), t.item_field.nullable)
        if pa.types.is_list(t):
            return ArrayType(convert(t.value_type), t.value_field.nullable)
        return from_arrow_type(t)

    return convert(at)


def has_maps(schema: Any) -> bool:
    """Whether a map occurs anywhere in the schema (Arrow hands maps to Python as lists of pairs)."""
    if isinstance(schema, list):
        return any(has_maps(b) for b in schema)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "map":
            return True
        if kind in ("record", "error"):
            return any(has_maps(f["type"]) for f in schema["fields"])
        if kind == "array":
            return has_maps(schema["items"])
        return isinstance(kind, (list, dict)) and has_maps(kind)
    return False


def python_value(schema: Any, value: Any) -> Any:
    """An Arrow row (StructArray.to_pylist) as fastavro writes it: maps from lists of pairs to dicts."""
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return python_value(branches[0], value) if len(branches) == 1 else value
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "map":
            pairs = value.items() if isinstance(value, dict) else value
            return {k: python_value(schema["values"], v) for k, v in pairs}
        if kind in ("record", "error"):
            return {f["name"]: python_value(f["type"], value.get(f["name"])) for f in schema["fields"]}
        if kind == "array":
            return [python_value(schema["items"], v) for v in value]
    return value
