"""JSON Schema compatibility: is every document the writer's schema accepts accepted by the reader's?

Checked keyword by keyword, as Confluent's JSON Schema diff does: types may widen, not narrow;
enums may grow; bounds may loosen; required properties may not be added; a property added where
the writer's content model is open (additionalProperties absent or true) is incompatible (old
documents may carry it with any value), a property removed where the reader's model is closed too.
"""

from __future__ import annotations

from typing import Any

_BOUNDS_MAX = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_BOUNDS_MIN = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_COMBINATORS = ("anyOf", "oneOf")


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    return _check(reader, writer, "#")


def _open(schema: Any) -> bool:
    return schema is True or schema == {}


def _types(schema: dict[str, Any]) -> set[str] | None:
    t = schema.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _check(reader: Any, writer: Any, path: str) -> list[str]:
    if _open(reader) or writer is False:
        return []
    if reader is False:
        return [f"{path}: the reader accepts nothing"]
    if _open(writer):
        return [f"{path}: the writer accepts anything, the reader does not"]
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return []
    out: list[str] = []
    rtypes, wtypes = _types(reader), _types(writer)
    if rtypes is not None:
        widened = set(rtypes) | ({"integer"} if "number" in rtypes else set())
        if wtypes is None or not wtypes <= widened:
            out.append(f"{path}: type {sorted(wtypes) if wtypes else 'any'} narrowed or changed to {sorted(rtypes)}")
    if "enum" in reader and ("enum" not in writer or not all(v in reader["enum"] for v in writer["enum"])):
        out.append(f"{path}: enum narrowed")
    if "const" in reader and writer.get("const", object()) != reader["const"]:
        out.append(f"{path}: const changed or added")
    for key in _BOUNDS_MAX:
        if key in reader and (key not in writer or writer[key] > reader[key]):
            out.append(f"{path}: {key} added or decreased")
    for key in _BOUNDS_MIN:
        if key in reader and (key not in writer or writer[key] < reader[key]):
            out.append(f"{path}: {key} added or increased")
    for key in ("pattern", "format", "multipleOf"):
        if key in reader and reader[key] != writer.get(key):
            out.append(f"{path}: {key} added or changed")
    added = set(reader.get("required") or ()) - set(writer.get("required") or ())
    if added:
        out.append(f"{path}: required properties added: {sorted(added)}")
    out += _properties(reader, writer, path)
    out += _items(reader, writer, path)
    for key in _COMBINATORS:
        if key in reader:
            branches = writer.get(key) or writer.get("anyOf") or writer.get("oneOf") or [writer]
            for i, branch in enumerate(branches):
                if all(_check(r, branch, f"{path}/{key}/{i}") for r in reader[key]):
                    out.append(f"{path}/{key}: no reader branch accepts the writer's branch {i}")
    return out


def _properties(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    out: list[str] = []
    rprops, wprops = reader.get("properties") or {}, writer.get("properties") or {}
    radd, wadd = reader.get("additionalProperties", True), writer.get("additionalProperties", True)
    for name, rschema in rprops.items():
        where = f"{path}/properties/{name}"
        if name in wprops:
            out += _check(rschema, wprops[name], where)
        elif wadd is not False and _check(rschema, wadd, where):
            out.append(f"{where}: property added to an open content model")
    for name, wschema in wprops.items():
        if name not in rprops:
            if radd is False:
                out.append(f"{path}/properties/{name}: property removed from a closed content model")
            elif isinstance(radd, dict):
                out += _check(radd, wschema, f"{path}/properties/{name}")
    if radd is False and wadd is not False:
        out.append(f"{path}: additionalProperties removed (the content model was closed)")
    elif isinstance(radd, dict) and wadd is not False:
        out += _check(radd, wadd, f"{path}/additionalProperties")
    return out


def _items(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    ritems, witems = reader.get("items"), writer.get("items")
    if ritems is None:
        return []
    if isinstance(ritems, list) or isinstance(witems, list):
        rl = ritems if isinstance(ritems, list) else []
        wl = witems if isinstance(witems, list) else []
        out = []
        for i, r in enumerate(rl):
            out += _check(r, wl[i] if i < len(wl) else True, f"{path}/items/{i}")
        return out
    return _check(ritems, True if witems is None else witems, f"{path}/items")
