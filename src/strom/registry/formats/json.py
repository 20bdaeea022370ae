"""JSON Schema, checked against its own metaschema by jsonschema (the draft its $schema names)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from jsonschema import exceptions as jsonschema_errors
from jsonschema import validators

from strom.registry.formats import InvalidSchema, ParsedSchema


def parse(text: str, references: Sequence[str] = ()) -> ParsedSchema:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidSchema(f"not JSON: {e}") from None
    if not isinstance(obj, dict | bool):
        raise InvalidSchema("a JSON Schema is an object or a boolean")
    try:
        validators.validator_for(obj).check_schema(obj)
    except jsonschema_errors.SchemaError as e:
        raise InvalidSchema(e.message) from None
    for ref in references:  # referenced schemas must be valid too; $ref is resolved by the clients
        parse(ref)
    return ParsedSchema("JSON", json.dumps(obj, separators=(",", ":"), ensure_ascii=False), obj)
