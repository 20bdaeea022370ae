"""Response encoder compiled once per kio entity class.

kio's ``entity_writer`` is generic: per field it goes through a chain of small writer functions,
each packing one value with its own ``struct.pack`` call. That made encoding the broker's largest
Python cost for Fetch responses over many partitions and for many small responses.

``entity_writer(cls)`` here reads the same schema (dataclass fields and their ``kafka_type``/``tag``
metadata, through ``kio.serial._introspect``) and generates the source of one straight-line
function per class: nested entities and array elements are written inline, and each run of
consecutive fixed-size fields (including the length prefixes and empty tagged-field counts that
sit between them) is packed by one precompiled ``struct.Struct``. The function appends to a
``bytearray``.

The bytes are exactly those of kio's writer, which stays the reference (tests/test_fastwrite.py
compares the two): same null encodings, same tagged-field rule (a tagged field is written when it
differs from its default, in tag order), same rounding of durations and timestamps. Values are
trusted to have the types the schema declares (``build`` makes them so), so no value is
type-checked on the way.

``dict_writer(cls)`` is the same compilation reading a handler's result dict instead of an entity:
it writes what ``entity_writer(cls)`` writes for ``build(cls, data)`` (tests/test_dict_writer.py
holds it to that), without building the entities, which cost several times the encoding.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import uuid_zero

from strom.protocol.build import _FieldPlan, _plan, _to_datetime, _to_error_code, _to_timedelta, build

Writer = Callable[[bytearray, Any], None]

# struct format of each fixed-size kafka_type and the expression (of ``{v}``) giving the packed value.
_FIXED: dict[str, tuple[str, str]] = {
    "int8": ("b", "{v}"),
    "int16": ("h", "{v}"),
    "int32": ("i", "{v}"),
    "int64": ("q", "{v}"),
    "uint8": ("B", "{v}"),
    "uint16": ("H", "{v}"),
    "uint32": ("I", "{v}"),
    "uint64": ("Q", "{v}"),
    "float64": ("d", "{v}"),
    "bool": ("?", "{v}"),  # struct packs truthiness, as kio does
    "error_code": ("h", "{v}"),  # an IntEnum: packs as its value
    # kio rounds the float milliseconds; doing the same keeps sub-millisecond values identical.
    "timedelta_i32": ("i", "round({v}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({v}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({v}.timestamp() * 1000)"),
    # kio writes a null uuid as the zero uuid.
    "uuid": ("16s", "(_ZERO_UUID if {v} is None else {v}.bytes)"),
}
_NULLABLE_FIXED: dict[str, tuple[str, str]] = {
    "uuid": _FIXED["uuid"],
    "datetime_i64": ("q", "(-1 if {v} is None else round({v}.timestamp() * 1000))"),
}
# Types packed as they are, so an array of them is one pack call.
_PLAIN_ARRAY = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float64", "bool"}
_SIZED = {"string", "bytes", "records"}

_BYTE = [bytes((i,)) for i in range(128)]


def uvarint(n: int) -> bytes:
    """Unsigned varint (7 bits a byte, low first), as kio's ``write_unsigned_varint``."""
    if 0 <= n < 0x80:
        return _BYTE[n]
    if n < 0:
        raise ValueError(f"negative uvarint {n}")
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _pack_array(fmt: str, items: tuple[Any, ...]) -> bytes:
    return struct.pack(f">{len(items)}{fmt}", *items)


def _read_once(f: dataclasses.Field[Any]) -> bool:
    """A fixed-size field packed as it is (its value appears once in the generated code)."""
    if not isinstance(classify_field(f), PrimitiveField):
        return False
    return _FIXED.get(f.metadata.get("kafka_type", ""), ("", ""))[1] == "{v}"


class _Source:
    """Lines of the generated function, plus the pending run of fixed-size values.

    A fixed-size value is not written at once: it joins the pending run, which becomes one
    ``out += S.pack(...)`` when something variable-sized is written, a block opens or the
    indentation changes. Temporaries get fresh names, so a pending argument always still refers
    to the value it was given when the run is packed.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_ZERO_UUID": uuid_zero.bytes, "_uv": uvarint, "_BYTE": _BYTE, "_pack_array": _pack_array, "round": round,
        }
        self._fmt: list[str] = []
        self._args: list[str] = []
        self._at: tuple[int, str] = (0, "")  # indentation and buffer of the pending run
        self._count = 0

    def temp(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: Any, prefix: str = "_c") -> str:
        name = self.temp(prefix)
        self.namespace[name] = value
        return name

    def fixed(self, indent: int, out: str, fmt: str, arg: str | None) -> None:
        """Queue one fixed-size value (``arg`` None: a pad byte, i.e. a zero)."""
        if (indent, out) != self._at:
            self.flush()
            self._at = (indent, out)
        self._fmt.append(fmt)
        if arg is not None:
            self._args.append(arg)

    def flush(self) -> None:
        if not self._fmt:
            return
        indent, out = self._at
        packer = struct.Struct(">" + "".join(self._fmt))
        self._fmt, self._args, pending = [], [], self._args
        if not pending:  # only pad bytes (empty tagged-field sections): a constant
            self.line(indent, f"{out} += {packer.pack()!r}")
            return
        self.line(indent, f"{out} += {self.const(packer, '_s')}.pack({', '.join(pending)})")

    def line(self, indent: int, text: str) -> None:
        """A statement that writes nothing (or writes after flushing, via ``write``)."""
        if self._fmt and indent != self._at[0]:
            self.flush()
        self.lines.append("    " * indent + text)

    def write(self, indent: int, out: str, expr: str) -> None:
        self.flush()
        self.line(indent, f"{out} += {expr}")

    def write_uvarint(self, indent: int, out: str, expr: str) -> None:
        """A length as uvarint; lengths under 128 (most) without calling a function."""
        n = self.temp("u")
        self.line(indent, f"{n} = {expr}")
        self.write(indent, out, f"_BYTE[{n}] if {n} < 128 else _uv({n})")

    def block(self, indent: int, text: str) -> None:
        """Open ``if``/``for``/``else``: pending values belong before it."""
        self.flush()
        self.line(indent, text)


class _Compiler:
    def __init__(self, src: _Source) -> None:
        self.src = src

    def entity(self, cls: Any, var: str, indent: int, out: str) -> None:
        """Inline the fields of entity ``var`` (an instance of ``cls``), then its tagged fields."""
        tagged: list[tuple[int, dataclasses.Field[Any]]] = []
        header = cls.__name__ == "RequestHeader"
        for f in dataclasses.fields(cls):
            tag = get_field_tag(f)
            if tag is not None:
                tagged.append((tag, f))
                continue
            if header and f.name == "client_id":  # Kafka keeps the classic string here
                self.string(self.load(var, f.name, indent), False, True, "string", indent, out)
                continue
            # A value the code reads once is read where it is packed; others get a local first.
            value = f"{var}.{f.name}" if _read_once(f) else self.load(var, f.name, indent)
            self.field(f, value, bool(cls.__flexible__), is_optional(f), indent, out)
        if not cls.__flexible__:
            if tagged:
                raise ValueError("Found tagged fields on a non-flexible model")
            return
        if not tagged:
            self.src.fixed(indent, out, "x", None)  # no tagged fields: count 0
            return
        self.tagged(sorted(tagged, key=lambda t: t[0]), var, indent, out)

    def load(self, var: str, name: str, indent: int) -> str:
        value = self.src.temp("v")
        self.src.line(indent, f"{value} = {var}.{name}")
        return value

    def tagged(self, tagged: list[tuple[int, dataclasses.Field[Any]]], var: str, indent: int, out: str) -> None:
        """Each tagged field that differs from its default, as tag, size and value; count first."""
        self.tagged_values([(tag, f, self.load(var, f.name, indent)) for tag, f in tagged], indent, out)

    def tagged_values(self, tagged: list[tuple[int, dataclasses.Field[Any], str]], indent: int, out: str) -> None:
        """The tagged-field section, from the fields' values already in locals."""
        src = self.src
        values = [(tag, f, value, src.const(get_tagged_field_default(f))) for tag, f, value in tagged]
        # Usually every tagged field holds its default, the very instance of the schema: then the
        # section is just its count, 0. (`is` first: comparing entities field by field costs.)
        src.block(indent, "if " + " and ".join(f"{value} is {default}" for _, _, value, default in values) + ":")
        src.fixed(indent + 1, out, "x", None)
        src.block(indent, "else:")
        count, section = src.temp("n"), src.temp("t")
        src.line(indent + 1, f"{count} = 0")
        src.line(indent + 1, f"{section} = bytearray()")
        for tag, f, value, default in values:
            data = src.temp("b")
            src.block(indent + 1, f"if not ({value} is {default} or {value} == {default}):")
            src.line(indent + 2, f"{data} = bytearray()")
            # Tagged fields are never written as nullable: their absence is their null.
            self.field(f, value, True, False, indent + 2, data)
            src.flush()
            src.line(indent + 2, f"{section} += {uvarint(tag)!r}")
            src.line(indent + 2, f"{section} += _uv(len({data}))")
            src.line(indent + 2, f"{section} += {data}")
            src.line(indent + 2, f"{count} += 1")
        src.write(indent + 1, out, f"_uv({count})")
        src.write(indent + 1, out, section)
        src.flush()

    def field(self, f: dataclasses.Field[Any], value: str, flexible: bool, optional: bool, indent: int,
              out: str) -> None:
        kind = classify_field(f)
        if isinstance(kind, PrimitiveField):
            self.primitive(get_schema_field_type(f), value, flexible, optional, indent, out)
        elif isinstance(kind, PrimitiveTupleField):
            self.primitive_array(get_schema_field_type(f), value, flexible, indent, out)
        elif isinstance(kind, EntityTupleField):
            item = self.src.temp("e")
            self.array_length(value, flexible, indent, out)
            self.src.block(indent, f"for {item} in {value} or ():")
            self.nested(kind.type_, item, indent + 1, out)
            self.src.flush()
        elif isinstance(kind, EntityField) and optional:
            # A nullable struct (KIP-893): int8 -1 for null, 1 before the fields.
            self.src.block(indent, f"if {value} is None:")
            self.src.fixed(indent + 1, out, "b", "-1")
            self.src.block(indent, "else:")
            self.src.fixed(indent + 1, out, "b", "1")
            self.nested(kind.type_, value, indent + 1, out)
            self.src.flush()
        else:
            self.nested(kind.type_, value, indent, out)

    def nested(self, cls: Any, value: str, indent: int, out: str) -> None:
        """A nested entity: inlined (the dict compiler also takes dicts here)."""
        self.entity(cls, value, indent, out)

    def primitive(self, kafka_type: str, value: str, flexible: bool, optional: bool, indent: int, out: str) -> None:
        if kafka_type in _SIZED:
            self.string(value, flexible, optional, kafka_type, indent, out)
            return
        table = _NULLABLE_FIXED if optional else _FIXED
        if kafka_type not in table:
            raise NotImplementedError(f"no writer for {kafka_type!r} field {flexible=} {optional=}")
        fmt, expr = table[kafka_type]
        self.src.fixed(indent, out, fmt, expr.format(v=value))

    def string(self, value: str, flexible: bool, optional: bool, kafka_type: str, indent: int, out: str) -> None:
        """string (UTF-8), bytes or records: compact (uvarint length + 1, 0 for null) or classic
        (int16 length for strings, int32 for bytes, -1 for null)."""
        src = self.src
        data = value
        # kio writes a records field as nullable whatever kio's type says (ShareFetch's is not
        # Optional although Kafka's schema makes it nullable): a missing one is written as null.
        optional = optional or kafka_type == "records"
        if kafka_type == "string":
            data = src.temp("s")
            src.line(indent, f"{data} = None if {value} is None else {value}.encode()" if optional
                     else f"{data} = {value}.encode()")
        if flexible:
            size = f"0 if {data} is None else len({data}) + 1" if optional else f"len({data}) + 1"
            src.write_uvarint(indent, out, size)
        else:
            width = "h" if kafka_type == "string" else "i"
            src.fixed(indent, out, width, f"-1 if {data} is None else len({data})" if optional else f"len({data})")
        src.write(indent, out, f"{data} or b''" if optional else data)

    def array_length(self, value: str, flexible: bool, indent: int, out: str) -> None:
        """Element count: uvarint count + 1 (0 for null) or int32 (-1 for null). kio writes a
        null array as null whether or not the schema allows it, so this does too."""
        if flexible:
            self.src.write_uvarint(indent, out, f"0 if {value} is None else len({value}) + 1")
        else:
            self.src.fixed(indent, out, "i", f"-1 if {value} is None else len({value})")

    def primitive_array(self, kafka_type: str, value: str, flexible: bool, indent: int, out: str) -> None:
        self.array_length(value, flexible, indent, out)
        if kafka_type in _PLAIN_ARRAY:
            fmt = _FIXED[kafka_type][0]
            self.src.write(indent, out, f"_pack_array({fmt!r}, {value} or ())")
            return
        item = self.src.temp("i")
        self.src.block(indent, f"for {item} in {value} or ():")
        self.primitive(kafka_type, item, flexible, False, indent + 1, out)  # elements are never null
        self.src.flush()


@cache
def entity_writer(cls: Any) -> Writer:
    """``write(out, entity)``: appends the encoding of ``entity`` (an instance of ``cls``) to ``out``."""
    src = _Source()
    _Compiler(src).entity(cls, "entity", 1, "out")
    return _compile(src, "entity", f"<fastwrite {cls.__module__}.{cls.__qualname__}>")


def _compile(src: _Source, argument: str, filename: str) -> Writer:
    """``def write(out, <argument>)`` from the generated lines."""
    src.flush()
    body = "\n".join(src.lines) or "    pass"
    text = f"def write(out, {argument}):\n{body}\n"
    exec(compile(text, filename, "exec"), src.namespace)  # source generated from the schema, never from input
    write: Writer = src.namespace["write"]
    write.__doc__ = text  # the generated source, for whoever debugs it
    return write


# --- writers from handler dicts ------------------------------------------------------------------
#
# ``dict_writer(cls)`` encodes what ``entity_writer(cls)`` would encode for ``build(cls, data)``,
# reading the handler's dict directly: building the frozen dataclasses costs several times the
# encoding for large responses. Each field's value is what build() would have put in the entity:
# the key's value converted as build() converts it, or, for a missing key, the dataclass default or
# build()'s zero. Nested values may be dicts (inlined) or kio entities (handed to entity_writer).
# Tagged fields are rare and compared with their defaults, so they go through build()'s own
# conversion and the entity writer's tagged-field code.

_MISSING = object()


class _ErrorCodes(dict[Any, int]):
    """int value of each error code, keyed by code (an IntEnum hashes as its int); anything else
    goes through build()'s conversion (which rejects unknown codes)."""

    def __missing__(self, value: Any) -> int:
        return int(_to_error_code(value))


_ERROR_CODES = _ErrorCodes({int(code): int(code) for code in ErrorCode})
# Integer milliseconds below this survive build()'s timedelta and the writer's float rounding exactly.
_EXACT_MS = 1 << 50


def _timedelta_ms(value: Any) -> int:
    if value.__class__ is int and -_EXACT_MS < value < _EXACT_MS:
        return value  # type: ignore[no-any-return]
    return round(_to_timedelta(value).total_seconds() * 1000)


# Integer milliseconds of the years 1-9999 (what build()'s datetime accepts): the writer's float
# rounding gives them back exactly, so they skip the datetime (which costs about 2 us).
_FIRST_MS, _LAST_MS = -62135596800000, 253402300799999


def _datetime_ms(value: Any) -> int:
    if value.__class__ is int and _FIRST_MS <= value <= _LAST_MS:
        return value  # type: ignore[no-any-return]
    return round(_to_datetime(value).timestamp() * 1000)


def _nullable_datetime_ms(value: Any) -> int:
    if value.__class__ is int and _FIRST_MS <= value <= _LAST_MS:
        return value  # type: ignore[no-any-return]
    value = _to_datetime(value)
    return -1 if value is None else round(value.timestamp() * 1000)


# kafka_type -> (struct format, function giving the packed value from what a handler may give).
_CONVERTED: dict[str, tuple[str, Callable[[Any], int]]] = {
    "error_code": ("h", _ERROR_CODES.__getitem__),
    "timedelta_i32": ("i", _timedelta_ms),
    "timedelta_i64": ("q", _timedelta_ms),
    "datetime_i64": ("q", _datetime_ms),
}


def _build_converter(p: _FieldPlan) -> Callable[[Any], Any]:
    """build()'s conversion of one present value of field ``p``."""
    nested = p.nested

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if nested is not None:
            if p.is_array:
                return tuple(v if isinstance(v, nested) else build(nested, v) for v in value)
            return value if isinstance(value, nested) else build(nested, value)
        return tuple(value) if p.is_array else p.convert(value)

    return convert


def _absent(f: dataclasses.Field[Any], p: _FieldPlan) -> Any:
    """What build() puts in the entity when the key is missing."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return p.zero


class _DictCompiler(_Compiler):
    def literal(self, value: Any) -> str:
        if value is None or value.__class__ in (int, bool, str, bytes):
            return repr(value)
        return self.src.const(value)

    def dict_entity(self, cls: Any, var: str, indent: int, out: str) -> None:
        """Inline the fields of ``cls`` read from mapping ``var``, then its tagged fields."""
        src = self.src
        flexible = bool(cls.__flexible__)
        plans = {p.name: p for p in _plan(cls)}
        header = cls.__name__ == "RequestHeader"
        get = src.temp("g")
        src.line(indent, f"{get} = {var}.get")
        tagged: list[tuple[int, dataclasses.Field[Any], str]] = []
        for f in dataclasses.fields(cls):
            p = plans[f.name]
            absent = _absent(f, p)
            read = f"{get}({f.name!r}, {self.literal(absent)})"
            tag = get_field_tag(f)
            if tag is not None:
                value = src.temp("v")
                src.line(indent, f"{value} = {get}({f.name!r}, _MISSING)")
                src.line(indent, f"{value} = {self.literal(absent)} if {value} is _MISSING "
                                 f"else {src.const(_build_converter(p), '_conv')}({value})")
                tagged.append((tag, f, value))
                continue
            kind = classify_field(f)
            optional = is_optional(f)
            kafka_type = f.metadata.get("kafka_type", "")
            if isinstance(kind, PrimitiveField) and kafka_type in _CONVERTED:
                fmt, convert = _CONVERTED[kafka_type]
                if kafka_type == "datetime_i64" and optional:
                    convert = _nullable_datetime_ms
                packed = self.packed_absent(kafka_type, absent)
                if convert(absent) == packed:  # build()'s missing value converts to what the writer packs
                    call = "_ERROR_CODES[{}]" if kafka_type == "error_code" else src.const(convert, "_cv") + "({})"
                    src.fixed(indent, out, fmt, call.format(read))
                else:  # a missing key's value is build()'s, not converted: pack its writer form
                    value = self.assign(f"{get}({f.name!r}, _MISSING)", indent)
                    src.line(indent, f"{value} = {self.literal(packed)} if {value} is _MISSING "
                                     f"else {src.const(convert, '_cv')}({value})")
                    src.fixed(indent, out, fmt, value)
            elif header and f.name == "client_id":
                self.string(self.assign(read, indent), False, True, "string", indent, out)
            elif _read_once(f):
                self.field(f, read, flexible, optional, indent, out)
            elif isinstance(kind, PrimitiveField):
                self.field(f, self.assign(read, indent), flexible, optional, indent, out)
            elif isinstance(kind, PrimitiveTupleField | EntityTupleField):
                self.field(f, self.sequence(read, indent), flexible, optional, indent, out)
            else:  # a nested entity, nullable or not
                self.field(f, self.assign(read, indent), flexible, optional, indent, out)
        if not flexible:
            if tagged:
                raise ValueError("Found tagged fields on a non-flexible model")
            return
        if not tagged:
            src.fixed(indent, out, "x", None)
            return
        self.tagged_values(sorted(tagged, key=lambda t: t[0]), indent, out)

    @staticmethod
    def packed_absent(kafka_type: str, absent: Any) -> Any:
        """The writer's packed value of build()'s value for a missing key (already converted)."""
        if kafka_type == "error_code":
            return int(absent)
        if kafka_type.startswith("timedelta"):
            return round(absent.total_seconds() * 1000)
        return -1 if absent is None else round(absent.timestamp() * 1000)

    def assign(self, expr: str, indent: int) -> str:
        value = self.src.temp("v")
        self.src.line(indent, f"{value} = {expr}")
        return value

    def sequence(self, expr: str, indent: int) -> str:
        """An array value: build() makes a tuple of any other iterable."""
        value = self.assign(expr, indent)
        self.src.block(indent, f"if {value} is not None and {value}.__class__ is not tuple "
                              f"and {value}.__class__ is not list:")
        self.src.line(indent + 1, f"{value} = tuple({value})")
        return value

    def nested(self, cls: Any, value: str, indent: int, out: str) -> None:
        """A nested entity given as a dict (inlined) or as a kio entity (its entity writer)."""
        src = self.src
        src.block(indent, f"if {value}.__class__ is dict or not isinstance({value}, {src.const(cls, '_k')}):")
        self.dict_entity(cls, value, indent + 1, out)
        src.block(indent, "else:")
        src.flush()
        src.line(indent + 1, f"{src.const(entity_writer(cls), '_w')}({out}, {value})")


@cache
def dict_writer(cls: Any) -> Writer:
    """``write(out, data)``: appends what ``entity_writer(cls)`` writes for ``build(cls, data)``."""
    src = _Source()
    src.namespace.update(_MISSING=_MISSING, _ERROR_CODES=_ERROR_CODES)
    _DictCompiler(src).dict_entity(cls, "data", 1, "out")
    return _compile(src, "data", f"<fastwrite dict {cls.__module__}.{cls.__qualname__}>")
