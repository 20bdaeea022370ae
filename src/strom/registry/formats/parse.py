"""One entry point for every schema type; references are resolved by the caller into the texts
of the schemas they name (transitively, dependencies first)."""

from __future__ import annotations

from collections.abc import Sequence

from strom.registry.formats import InvalidSchema, ParsedSchema, avro, json, protobuf

SCHEMA_TYPES = ("JSON", "PROTOBUF", "AVRO")


def parse(schema_type: str, text: str, references: Sequence[tuple[str, str]] = ()) -> ParsedSchema:
    """``references``: (reference name, schema text)."""
    if schema_type == "AVRO":
        return avro.parse(text, [t for _, t in references])
    if schema_type == "JSON":
        return json.parse(text, [t for _, t in references])
    if schema_type == "PROTOBUF":
        return protobuf.parse(text, references)
    raise InvalidSchema(f"unknown schema type {schema_type}; the types are {', '.join(SCHEMA_TYPES)}")
