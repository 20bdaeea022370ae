"""The records of ``_schemas`` in Confluent's format: JSON keys and values, one record per change.

Keys (compaction keeps the last value per key; a key names what its value replaces):
- SCHEMA ``{"keytype":"SCHEMA","subject":s,"version":v,"magic":1}``: one version of a subject; the
  value has subject, version, id, schema, schemaType (absent for AVRO), references, deleted. A
  permanent delete is a tombstone (null value) under the same key.
- CONFIG ``{"keytype":"CONFIG","subject":s|null,"magic":0}``: ``{"compatibilityLevel": LEVEL}``
  (subject null: the global level); a tombstone drops a subject's level.
- MODE ``{"keytype":"MODE","subject":s|null,"magic":0}``: ``{"mode": MODE}``, likewise.
- DELETE_SUBJECT ``{"keytype":"DELETE_SUBJECT","subject":s,"magic":0}``: ``{"subject":s,"version":v}``,
  every version up to v soft-deleted.
- CLEAR_SUBJECT ``{"keytype":"CLEAR_SUBJECT","subject":s,"magic":0}``: ``{"subject":s}``, the
  subject's soft-deleted versions gone (the SCHEMA tombstones follow).
- NOOP ``{"keytype":"NOOP","magic":0}``: Confluent's readers skip it; strom's value
  ``{"maxId": n}`` keeps the highest id ever given, so ids are not reused once compaction has
  removed a permanently deleted schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class RecordFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = field(default=())
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id,
                               "schema": self.schema}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["deleted"] = self.deleted
        return out


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def clear_subject_key(subject: str) -> bytes:
    return _dump({"keytype": "CLEAR_SUBJECT", "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return _dump({"keytype": "NOOP", "magic": 0})


def schema_value(value: SchemaValue) -> bytes:
    return _dump(value.to_json())


def config_value(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def clear_subject_value(subject: str) -> bytes:
    return _dump({"subject": subject})


def max_id_value(max_id: int) -> bytes:
    return _dump({"maxId": max_id})


def decode_key(data: bytes) -> dict[str, Any]:
    try:
        key = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordFormatError(f"key is not JSON: {e}") from None
    if not isinstance(key, dict) or not isinstance(key.get("keytype"), str):
        raise RecordFormatError("key has no keytype")
    return key


def decode_value(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordFormatError(f"value is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise RecordFormatError("value is not a JSON object")
    return value


def parse_schema_value(value: dict[str, Any]) -> SchemaValue:
    try:
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                     for r in value.get("references") or ())
        return SchemaValue(str(value["subject"]), int(value["version"]), int(value["id"]), str(value["schema"]),
                           str(value.get("schemaType") or "AVRO"), refs, bool(value.get("deleted", False)))
    except (KeyError, TypeError, ValueError) as e:
        raise RecordFormatError(f"bad schema value: {e!r}") from None
