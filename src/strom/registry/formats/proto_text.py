"""A FileDescriptorProto printed as ``.proto`` source text (no maintained PyPI library does this:
protobuf's Python API has no DebugString, and the .proto parsers on PyPI go the other way).

What is printed: syntax (proto2, proto3), package, imports (public, weak), file, message, field,
oneof, enum and enum value options that protobuf itself defines (custom options are extensions
that this file's descriptor cannot name: they are left out), messages with their nested messages
and enums, fields with labels, proto3 ``optional`` (its synthetic oneof not printed), defaults and
json_name, oneofs, maps (their entry messages folded back into ``map<K, V>``), reserved ranges and
names, extension ranges, ``extend`` blocks, services. Types are written fully qualified (``.pkg.T``),
as the descriptor holds them. Groups and editions files are not printed (None).

The registry prints a descriptor only where protoc, compiling the text back, gives the same
descriptor (strom.registry.ops checks that): what this cannot print faithfully stays base64.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, text_encoding

from strom.registry.formats.protobuf import default_json_name

F = descriptor_pb2.FieldDescriptorProto
_TYPES = {F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64",
          F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64", F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool",
          F.TYPE_STRING: "string", F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
          F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64"}
_LABELS = {F.LABEL_OPTIONAL: "optional", F.LABEL_REQUIRED: "required", F.LABEL_REPEATED: "repeated"}
_MAX_FIELD = 536870911  # the largest field number: "max" in ranges


class Unprintable(ValueError):
    """A descriptor with something this printer does not write (groups, editions)."""


def to_text(file: descriptor_pb2.FileDescriptorProto) -> str | None:
    """``file`` as .proto text, or None when it holds what is not printed."""
    try:
        return _File(file).text()
    except Unprintable:
        return None


def _quote(s: str) -> str:
    return '"' + text_encoding.CEscape(s, as_utf8=True) + '"'


def _option_value(field: Any, value: Any) -> str:
    if field.type == field.TYPE_ENUM:
        return str(field.enum_type.values_by_number[value].name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bytes):
        return '"' + text_encoding.CEscape(value, as_utf8=False) + '"'
    return repr(value) if isinstance(value, float) else str(value)


def _options(options: Any, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(name, value) of the options protobuf defines that are set; message-valued ones (features,
    uninterpreted options) are not written by hand in proto2/proto3 files."""
    out = []
    for field, value in options.ListFields():
        if field.name in skip or field.is_extension or field.type == field.TYPE_MESSAGE:
            continue
        if field.is_repeated:
            raise Unprintable(f"repeated option {field.name}")
        out.append((field.name, _option_value(field, value)))
    return out


def _ranges(ranges: Iterable[Any], exclusive: bool) -> str:
    parts = []
    for r in ranges:
        end = r.end - 1 if exclusive else r.end
        if end == r.start:
            parts.append(str(r.start))
        else:
            parts.append(f"{r.start} to {'max' if end >= _MAX_FIELD else end}")
    return ", ".join(parts)


class _File:
    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        if file.syntax not in ("", "proto2", "proto3"):
            raise Unprintable(f"syntax {file.syntax}")
        self.file = file
        self.proto3 = file.syntax == "proto3"
        self.lines: list[str] = []

    def out(self, depth: int, line: str) -> None:
        self.lines.append("  " * depth + line if line else "")

    def text(self) -> str:
        f = self.file
        self.out(0, f'syntax = "{f.syntax or "proto2"}";')
        if f.package:
            self.out(0, f"package {f.package};")
        if f.dependency:
            self.out(0, "")
            public, weak = set(f.public_dependency), set(f.weak_dependency)
            for i, dep in enumerate(f.dependency):
                kind = "public " if i in public else "weak " if i in weak else ""
                self.out(0, f"import {kind}{_quote(dep)};")
        if f.HasField("options"):
            opts = _options(f.options)
            if opts:
                self.out(0, "")
            for name, value in opts:
                self.out(0, f"option {name} = {value};")
        scope = f".{f.package}" if f.package else ""
        for m in f.message_type:
            self.out(0, "")
            self.message(m, 0, scope)
        for e in f.enum_type:
            self.out(0, "")
            self.enum(e, 0)
        self.extensions(f.extension, 0)
        for s in f.service:
            self.out(0, "")
            self.service(s)
        return "\n".join(self.lines) + "\n"

    def message(self, m: descriptor_pb2.DescriptorProto, depth: int, scope: str) -> None:
        full = f"{scope}.{m.name}"
        self.out(depth, f"message {m.name} {{")
        inner = depth + 1
        for name, value in _options(m.options, skip=("map_entry",)) if m.HasField("options") else []:
            self.out(inner, f"option {name} = {value};")
        entries = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
        done: set[int] = set()
        for field in m.field:
            if field.HasField("oneof_index") and not field.proto3_optional:
                if field.oneof_index in done:
                    continue
                done.add(field.oneof_index)
                oneof = m.oneof_decl[field.oneof_index]
                self.out(inner, f"oneof {oneof.name} {{")
                for name, value in _options(oneof.options) if oneof.HasField("options") else []:
                    self.out(inner + 1, f"option {name} = {value};")
                for member in m.field:
                    if member.HasField("oneof_index") and member.oneof_index == field.oneof_index:
                        self.out(inner + 1, self.field(member, entries, in_oneof=True))
                self.out(inner, "}")
            else:
                self.out(inner, self.field(field, entries))
        for n in m.nested_type:
            if f"{full}.{n.name}" not in entries:
                self.message(n, inner, full)
        for e in m.enum_type:
            self.enum(e, inner)
        self.extensions(m.extension, inner)
        if m.extension_range:
            self.out(inner, f"extensions {_ranges(m.extension_range, exclusive=True)};")
        if m.reserved_range:
            self.out(inner, f"reserved {_ranges(m.reserved_range, exclusive=True)};")
        if m.reserved_name:
            self.out(inner, "reserved " + ", ".join(_quote(n) for n in m.reserved_name) + ";")
        self.out(depth, "}")

    def type_name(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type == F.TYPE_GROUP:
            raise Unprintable("groups")
        if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
            return field.type_name
        return _TYPES[field.type]

    def field(self, field: descriptor_pb2.FieldDescriptorProto,
              entries: dict[str, descriptor_pb2.DescriptorProto], in_oneof: bool = False) -> str:
        entry = entries.get(field.type_name) if field.type == F.TYPE_MESSAGE else None
        if entry is not None and field.label == F.LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            head = f"map<{self.type_name(key)}, {self.type_name(value)}>"
        else:
            label = ""
            if field.proto3_optional:
                label = "optional "
            elif field.label == F.LABEL_REPEATED:
                label = "repeated "
            elif not in_oneof and not self.proto3:
                label = _LABELS[field.label] + " "
            elif field.label == F.LABEL_REQUIRED:
                label = "required "
            head = label + self.type_name(field)
        opts: list[tuple[str, str]] = []
        if field.HasField("default_value"):
            d = field.default_value
            if field.type == F.TYPE_STRING:
                d = _quote(d)
            elif field.type == F.TYPE_BYTES:
                d = f'"{d}"'  # the descriptor holds bytes defaults C-escaped already
            opts.append(("default", d))
        if field.HasField("json_name") and field.json_name != default_json_name(field.name):
            opts.append(("json_name", _quote(field.json_name)))
        if field.HasField("options"):
            opts += _options(field.options)
        tail = " [" + ", ".join(f"{k} = {v}" for k, v in opts) + "]" if opts else ""
        return f"{head} {field.name} = {field.number}{tail};"

    def enum(self, e: descriptor_pb2.EnumDescriptorProto, depth: int) -> None:
        self.out(depth, f"enum {e.name} {{")
        for name, value in _options(e.options) if e.HasField("options") else []:
            self.out(depth + 1, f"option {name} = {value};")
        for v in e.value:
            opts = _options(v.options) if v.HasField("options") else []
            tail = " [" + ", ".join(f"{k} = {val}" for k, val in opts) + "]" if opts else ""
            self.out(depth + 1, f"{v.name} = {v.number}{tail};")
        if e.reserved_range:
            self.out(depth + 1, f"reserved {_ranges(e.reserved_range, exclusive=False)};")
        if e.reserved_name:
            self.out(depth + 1, "reserved " + ", ".join(_quote(n) for n in e.reserved_name) + ";")
        self.out(depth, "}")

    def extensions(self, fields: Iterable[descriptor_pb2.FieldDescriptorProto], depth: int) -> None:
        by_extendee: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
        for field in fields:
            by_extendee.setdefault(field.extendee, []).append(field)
        for extendee, members in by_extendee.items():
            if depth == 0:
                self.out(0, "")
            self.out(depth, f"extend {extendee} {{")
            for field in members:
                self.out(depth + 1, self.field(field, {}))
            self.out(depth, "}")

    def service(self, s: descriptor_pb2.ServiceDescriptorProto) -> None:
        self.out(0, f"service {s.name} {{")
        for name, value in _options(s.options) if s.HasField("options") else []:
            self.out(1, f"option {name} = {value};")
        for m in s.method:
            arg = ("stream " if m.client_streaming else "") + m.input_type
            ret = ("stream " if m.server_streaming else "") + m.output_type
            opts = _options(m.options) if m.HasField("options") else []
            if opts:
                self.out(1, f"rpc {m.name}({arg}) returns ({ret}) {{")
                for name, value in opts:
                    self.out(2, f"option {name} = {value};")
                self.out(1, "}")
            else:
                self.out(1, f"rpc {m.name}({arg}) returns ({ret});")
        self.out(0, "}")
