"""Compatibility levels: which earlier versions a new schema is checked against, and which way.

BACKWARD: the new schema reads data written with the latest version; FORWARD: the latest reads data
written with the new one; FULL: both. The _TRANSITIVE levels check every live version, not only the
latest. NONE checks nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.registry.compat import avro, json, protobuf
from strom.registry.formats import ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def can_read(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """What stops ``reader`` reading data written with ``writer`` (empty: nothing)."""
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == "AVRO":
        return avro.incompatibilities(reader.parsed, writer.parsed)
    if reader.schema_type == "JSON":
        return json.incompatibilities(reader.parsed, writer.parsed)
    return protobuf.incompatibilities(reader.parsed, writer.parsed)


def check(level: str, new: ParsedSchema, existing: Sequence[ParsedSchema]) -> list[str]:
    """Why ``new`` is incompatible under ``level`` with ``existing`` (oldest first; the live
    versions of the subject); empty when it is compatible."""
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    problems: list[str] = []
    for old in against:
        if backward:
            problems += can_read(new, old)
        if forward:
            problems += can_read(old, new)
    return problems
