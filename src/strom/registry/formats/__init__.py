"""Schema formats: parse a schema text with the library made for it, give its canonical text (the
same schema written differently gets the same text, and so the same id), the text stored and what its
compatibility checks read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class InvalidSchema(ValueError):
    """The text is not a valid schema of its type (Confluent's 42201)."""


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    schema_type: str  # AVRO, JSON, PROTOBUF
    canonical: str  # what is compared: the same schema written differently has the same canonical text
    parsed: Any  # what compat/<type>.py reads
    given: str | None = None  # what is stored when it is not the canonical text (Protobuf: as registered)

    @property
    def stored(self) -> str:
        return self.canonical if self.given is None else self.given
