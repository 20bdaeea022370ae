"""The registry's state as ``_schemas`` says it is: subjects and their versions, schemas by id,
compatibility levels and modes. Pure: ``apply`` takes one record of the topic, in offset order."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from strom.registry import records as rec
from strom.registry.records import SchemaValue

log = logging.getLogger("strom.registry")



@dataclass
class RegistryState:
    subjects: dict[str, dict[int, SchemaValue]] = field(default_factory=dict)  # soft-deleted included
    configs: dict[str | None, str] = field(default_factory=dict)  # None: the global level
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0  # never goes down: ids are not reused

    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        """One record of ``_schemas``; an unreadable one is skipped with a warning (Confluent's
        readers do the same), a keytype strom does not know is skipped quietly."""
        if key_bytes is None:
            return
        try:
            key = rec.decode_key(key_bytes)
            value = rec.decode_value(value_bytes) if value_bytes is not None else None
            self._apply(key, value)
        except rec.RecordFormatError as e:
            log.warning("skipping an unreadable _schemas record: %s", e)

    def _apply(self, key: dict[str, object], value: dict[str, object] | None) -> None:
        keytype = key["keytype"]
        subject = key.get("subject")
        if keytype == "SCHEMA":
            if not isinstance(subject, str) or not isinstance(key.get("version"), int):
                raise rec.RecordFormatError("SCHEMA key without subject and version")
            version = key["version"]
            assert isinstance(version, int)
            if value is None:  # a permanent delete
                versions = self.subjects.get(subject, {})
                versions.pop(version, None)
                if not versions:
                    self.subjects.pop(subject, None)
                return
            sv = rec.parse_schema_value(value)
            self.subjects.setdefault(subject, {})[version] = sv
            self.max_id = max(self.max_id, sv.id)
        elif keytype == "CONFIG":
            name = subject if isinstance(subject, str) else None
            level = value.get("compatibilityLevel") if value is not None else None
            if isinstance(level, str):
                self.configs[name] = level
            else:
                self.configs.pop(name, None)
        elif keytype == "MODE":
            name = subject if isinstance(subject, str) else None
            mode = value.get("mode") if value is not None else None
            if isinstance(mode, str):
                self.modes[name] = mode
            else:
                self.modes.pop(name, None)
        elif keytype == "DELETE_SUBJECT" and isinstance(subject, str) and value is not None:
            upto = value.get("version")
            for v, sv in list(self.subjects.get(subject, {}).items()):
                if not isinstance(upto, int) or v <= upto:
                    self.subjects[subject][v] = _deleted(sv)
        elif keytype == "CLEAR_SUBJECT" and isinstance(subject, str) and value is not None:
            versions = self.subjects.get(subject, {})
            for v in [v for v, sv in versions.items() if sv.deleted]:
                del versions[v]
            if not versions:
                self.subjects.pop(subject, None)
        elif keytype == "NOOP" and value is not None:
            max_id = value.get("maxId")
            if isinstance(max_id, int):
                self.max_id = max(self.max_id, max_id)

    # ------------------------------------------------------------------ reads

    def live(self, subject: str) -> list[SchemaValue]:
        return [sv for _, sv in sorted(self.subjects.get(subject, {}).items()) if not sv.deleted]

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaValue]:
        return [sv for _, sv in sorted(self.subjects.get(subject, {}).items()) if deleted or not sv.deleted]

    def by_id(self, schema_id: int) -> list[SchemaValue]:
        """Every version, soft-deleted ones too, that has this id (one schema, many subjects)."""
        return [sv for versions in self.subjects.values() for sv in versions.values() if sv.id == schema_id]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas that refer to this subject version."""
        out = {sv.id for versions in self.subjects.values() for sv in versions.values()
               if not sv.deleted and any(r.subject == subject and r.version == version for r in sv.references)}
        return sorted(out)


def _deleted(sv: SchemaValue) -> SchemaValue:
    return SchemaValue(sv.subject, sv.version, sv.id, sv.schema, sv.schema_type, sv.references, True)
