"""Avro schemas, parsed and validated by fastavro (names, types, defaults against their types)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from strom.registry.formats import InvalidSchema, ParsedSchema


@dataclass(frozen=True, slots=True)
class AvroSchema:
    schema: Any  # fastavro's parsed form: named types by full name after their first definition
    named: dict[str, Any]  # full name -> definition, the referenced schemas' included


def parse(text: str, references: Sequence[str] = ()) -> ParsedSchema:
    """``references``: the texts of the schemas this one refers to, dependencies first."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidSchema(f"not JSON: {e}") from None
    named: dict[str, Any] = {}
    try:
        for ref in references:
            fastavro.parse_schema(json.loads(ref), named_schemas=named)
        parsed = fastavro.parse_schema(obj, named_schemas=named)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidSchema(f"{type(e).__name__}: {e}") from None
    # The text as JSON without whitespace: the same schema however it is spaced has one form (and one
    # id); docs and defaults stay, as they do in Confluent's canonical string.
    canonical = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return ParsedSchema("AVRO", canonical, AvroSchema(_strip(parsed), named))


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if not k.startswith("__fastavro")
                and k != "__named_schemas"}
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    return schema
