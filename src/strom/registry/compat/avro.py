"""Avro compatibility: can a reader with one schema read what a writer wrote with another? Avro's
schema resolution rules (the specification's "Schema Resolution"): promotions, fields matched by
name or alias, defaults for fields the writer lacks, enum symbols, union branches."""

from __future__ import annotations

from typing import Any

from strom.registry.formats.avro import AvroSchema

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def incompatibilities(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Empty when every datum written with ``writer`` can be read with ``reader``."""
    return _Checker(reader.named, writer.named).check(reader.schema, writer.schema, "/")


def _short(name: str) -> str:
    return name.rpartition(".")[2]


class _Checker:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.rnamed = reader_named
        self.wnamed = writer_named
        self.seen: set[tuple[str, str]] = set()  # named pairs under check (recursive types)

    def _resolve(self, schema: Any, named: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return named.get(schema, schema)
        if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES and "logicalType" not in schema:
            return schema["type"]
        return schema

    @staticmethod
    def _type(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        if isinstance(schema, dict):
            return str(schema["type"])
        return str(schema)

    def _names_match(self, reader: dict[str, Any], writer: dict[str, Any]) -> bool:
        wname = writer["name"]
        if _short(reader["name"]) == _short(wname):
            return True
        return any(alias in (wname, _short(wname)) or _short(alias) == _short(wname)
                   for alias in reader.get("aliases") or ())

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self._resolve(reader, self.rnamed)
        writer = self._resolve(writer, self.wnamed)
        rtype, wtype = self._type(reader), self._type(writer)
        if wtype == "union":
            # Each branch the writer may have written must be readable.
            out = []
            for i, branch in enumerate(writer):
                out += self.check(reader, branch, f"{path}{i}/")
            return out
        if rtype == "union":
            for branch in reader:
                if not self.check(branch, writer, path):
                    return []
            return [f"{path}: reader union lacks a branch for the writer's {wtype}"]
        if rtype in _PRIMITIVES or wtype in _PRIMITIVES:
            if rtype == wtype or rtype in _PROMOTIONS.get(wtype, ()):
                return []
            return [f"{path}: reader type {rtype} cannot read writer type {wtype}"]
        if rtype != wtype:
            return [f"{path}: reader type {rtype} cannot read writer type {wtype}"]
        if rtype in ("record", "enum", "fixed") and not self._names_match(reader, writer):
            return [f"{path}: reader name {reader['name']} does not match writer name {writer['name']}"]
        if rtype == "record":
            pair = (reader["name"], writer["name"])
            if pair in self.seen:
                return []
            self.seen.add(pair)
            return self._record(reader, writer, path)
        if rtype == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path}: reader enum lacks the writer's symbols {missing}"]
            return []
        if rtype == "fixed":
            if reader["size"] != writer["size"]:
                return [f"{path}: fixed size {writer['size']} read as size {reader['size']}"]
            return []
        if rtype == "array":
            return self.check(reader["items"], writer["items"], f"{path}items/")
        if rtype == "map":
            return self.check(reader["values"], writer["values"], f"{path}values/")
        return [f"{path}: unknown type {rtype}"]

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        out: list[str] = []
        wfields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *(field.get("aliases") or ())]
            match = next((wfields[n] for n in names if n in wfields), None)
            where = f"{path}fields/{field['name']}/"
            if match is None:
                if "default" not in field:
                    out.append(f"{where}: reader field {field['name']} has no default and the writer lacks it")
                continue
            out += self.check(field["type"], match["type"], where)
        return out
