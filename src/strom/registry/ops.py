"""The registry's operations, as Confluent's REST API defines them, over the Store: reads of the
state and sequenced writes. Each raises a RegistryError with Confluent's code when refused."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from strom.registry import compat, errors
from strom.registry import records as rec
from strom.registry.formats import InvalidSchema, ParsedSchema, proto_text, protobuf
from strom.registry.formats.parse import parse
from strom.registry.records import Reference, SchemaValue
from strom.registry.state import RegistryState
from strom.registry.store import Record, Store

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class NewSchema:
    """A schema as a request gives it (POST .../versions, lookup, compatibility checks)."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    id: int | None = None  # IMPORT mode only
    version: int | None = None

    @classmethod
    def from_body(cls, body: Any) -> NewSchema:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise errors.invalid_schema("the body must be a JSON object with a \"schema\" string")
        try:
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in body.get("references") or ())
        except (KeyError, TypeError, ValueError):
            raise errors.invalid_schema("each reference needs name, subject and version") from None
        given_id, given_version = body.get("id"), body.get("version")
        return cls(body["schema"], str(body.get("schemaType") or "AVRO").upper(), refs,
                   given_id if isinstance(given_id, int) and given_id > 0 else None,
                   given_version if isinstance(given_version, int) and given_version > 0 else None)


def parse_version(text: str) -> int | None:
    """A version in a path: a number in [1, 2^31-1], or latest (-1): None for latest."""
    if text == "latest" or text == "-1":
        return None
    try:
        version = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if not 1 <= version <= INT_MAX:
        raise errors.invalid_version(text)
    return version


def schema_json(sv: SchemaValue, *, with_subject: bool = True, text: str | None = None) -> dict[str, Any]:
    """A version as Confluent answers it (``text``: the schema as rendered for the format asked)."""
    out: dict[str, Any] = {}
    if with_subject:
        out.update(subject=sv.subject, version=sv.version)
    out["id"] = sv.id
    if sv.schema_type != "AVRO":
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = [r.to_json() for r in sv.references]
    out["schema"] = sv.schema if text is None else text
    return out


class Registry:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def state(self) -> RegistryState:
        return await self.store.fresh_state()

    # ------------------------------------------------------------------ schema texts

    def _resolve(self, state: RegistryState, refs: tuple[Reference, ...], seen: frozenset[tuple[str, int]] = frozenset()
                 ) -> list[tuple[str, str]]:
        """(name, text) of every schema ``refs`` name, transitively, dependencies first."""
        out: list[tuple[str, str]] = []
        for ref in refs:
            target = state.subjects.get(ref.subject, {}).get(ref.version)
            if target is None or (ref.subject, ref.version) in seen:
                raise errors.invalid_schema(f"reference {ref.name} names {ref.subject} version {ref.version}, "
                                            "which does not exist")
            out += self._resolve(state, target.references, seen | {(ref.subject, ref.version)})
            out.append((ref.name, target.schema))
        return out

    def parsed(self, state: RegistryState, sv: SchemaValue) -> ParsedSchema:
        return _parse_cached(sv.schema_type, sv.schema, tuple(self._resolve(state, sv.references)))

    async def parse_new(self, state: RegistryState, new: NewSchema) -> ParsedSchema:
        """Parsed in a thread: a Protobuf text is compiled by protoc in a subprocess."""
        refs = tuple(self._resolve(state, new.references))
        try:
            return await asyncio.to_thread(_parse_cached, new.schema_type, new.schema, refs)
        except InvalidSchema as e:
            raise errors.invalid_schema(str(e)) from None

    async def _warm(self, state: RegistryState, svs: list[SchemaValue]) -> None:
        """Parse the stored Protobuf schemas among ``svs`` in a thread, so that the checks that
        follow on the event loop (under the write lock) find them parsed."""
        jobs = [(sv.schema_type, sv.schema, tuple(self._resolve(state, sv.references)))
                for sv in svs if sv.schema_type == "PROTOBUF"]
        if jobs:
            await asyncio.to_thread(_parse_all, jobs)

    def same(self, state: RegistryState, sv: SchemaValue, parsed: ParsedSchema,
             references: tuple[Reference, ...]) -> bool:
        """Whether the stored ``sv`` is the schema ``parsed`` (with these references): its canonical
        text is the same (Avro and JSON store that; a Protobuf schema is stored as registered)."""
        if sv.schema_type != parsed.schema_type or sv.references != references:
            return False
        if sv.schema in (parsed.canonical, parsed.stored):
            return True
        if sv.schema_type != "PROTOBUF":
            return False
        try:
            return _canonical(sv.schema_type, sv.schema, tuple(self._resolve(state, sv.references))) == parsed.canonical
        except (InvalidSchema, errors.RegistryError):
            return False

    def id_for(self, state: RegistryState, parsed: ParsedSchema, references: tuple[Reference, ...]) -> SchemaValue | None:
        """The schema already given an id (in any subject) that is ``parsed``, if any."""
        for versions in state.subjects.values():
            for sv in versions.values():
                if self.same(state, sv, parsed, references):
                    return sv
        return None

    def _candidates(self, state: RegistryState, subject: str, references: tuple[Reference, ...]) -> list[SchemaValue]:
        """What a registration compares and checks: the subject's live versions and every schema
        with the same references."""
        out = list(state.live(subject))
        out += [sv for versions in state.subjects.values() for sv in versions.values() if sv.references == references]
        return out

    async def render(self, sv: SchemaValue, fmt: str | None) -> str:
        """The schema text to answer: as stored, except for Protobuf, answered as .proto text unless
        ``format=serialized`` asks for the base64 descriptor (as Confluent does): a text with
        ``serialized`` is its descriptor; a descriptor (what confluent-kafka's ProtobufSerializer
        registers) without it is printed as text (formats.proto_text) where protoc compiles that
        text back to the same schema, else given as stored. ``serialized`` is accepted for every type."""
        if sv.schema_type != "PROTOBUF" or (fmt == "serialized") == protobuf.is_serialized(sv.schema):
            return sv.schema
        state = await self.state()
        refs = tuple(self._resolve(state, sv.references))
        if fmt != "serialized":
            return await asyncio.to_thread(_printed, sv.schema, refs) or sv.schema
        parsed = await asyncio.to_thread(_parse_cached, sv.schema_type, sv.schema, refs)
        return str(parsed.parsed.serialized)

    # ------------------------------------------------------------------ modes and levels

    @staticmethod
    def mode(state: RegistryState, subject: str | None) -> str:
        return state.modes.get(subject) or state.modes.get(None) or "READWRITE"

    @staticmethod
    def level(state: RegistryState, subject: str | None) -> str:
        return state.configs.get(subject) or state.configs.get(None) or compat.DEFAULT_LEVEL

    def _writable(self, state: RegistryState, subject: str | None) -> None:
        if self.mode(state, subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise errors.not_permitted(f"Subject {subject} is in read-only mode" if subject
                                       else "The registry is in read-only mode")

    # ------------------------------------------------------------------ register and look up

    async def register(self, subject: str, new: NewSchema, normalize: bool = False) -> dict[str, Any]:
        state = await self.state()
        parsed = await self.parse_new(state, new)  # parsing is the slow part: outside the write lock
        await self._warm(state, self._candidates(state, subject, new.references))

        def decide(state: RegistryState) -> tuple[list[Record], dict[str, Any]]:
            self._writable(state, subject)
            importing = self.mode(state, subject) == "IMPORT"
            versions = state.subjects.get(subject, {})
            for sv in state.live(subject):
                if self.same(state, sv, parsed, new.references) and (new.id is None or new.id == sv.id):
                    return [], {"id": sv.id, "version": sv.version, "subject": subject}
            text = parsed.stored
            if importing:
                if new.id is None:
                    raise errors.not_permitted("IMPORT mode needs the schema's id")
                taken = state.by_id(new.id)
                if taken and not self.same(state, taken[0], parsed, new.references):
                    raise errors.RegistryError(422, 42207, f"Schema id {new.id} is taken by another schema")
                schema_id = new.id
                if taken:
                    text = taken[0].schema
            else:
                if new.id is not None:
                    raise errors.not_permitted("a schema's id may be given only in IMPORT mode")
                problems = compat.check(self.level(state, subject), parsed,
                                        [self.parsed(state, sv) for sv in state.live(subject)])
                if problems:
                    raise errors.incompatible(problems)
                found = self.id_for(state, parsed, new.references)
                # One id, one text: a schema given again in another form is stored as it was first.
                schema_id = found.id if found is not None else state.max_id + 1
                if found is not None:
                    text = found.schema
            version = new.version if importing and new.version else max(versions, default=0) + 1
            if version in versions:
                raise errors.not_permitted(f"Subject {subject} already has version {version}")
            value = SchemaValue(subject, version, schema_id, text, parsed.schema_type, new.references)
            return [(rec.schema_key(subject, version), rec.schema_value(value))], \
                {"id": schema_id, "version": version, "subject": subject}

        return await self.store.write(decide)

    async def lookup(self, subject: str, new: NewSchema, deleted: bool = False) -> dict[str, Any]:
        state = await self.state()
        if not state.versions(subject, deleted=True):
            raise errors.subject_not_found(subject)
        parsed = await self.parse_new(state, new)
        await self._warm(state, state.versions(subject, deleted=deleted))
        for sv in reversed(state.versions(subject, deleted=deleted)):
            if self.same(state, sv, parsed, new.references):
                return schema_json(sv)
        raise errors.schema_not_found()

    # ------------------------------------------------------------------ reads

    async def subjects(self, prefix: str = "", deleted: bool = False) -> list[str]:
        state = await self.state()
        return sorted(s for s in state.subjects if s.startswith(prefix) and state.versions(s, deleted))

    async def version(self, subject: str, version_text: str, deleted: bool = False) -> SchemaValue:
        version = parse_version(version_text)
        state = await self.state()
        return self._version(state, subject, version, deleted)

    @staticmethod
    def _version(state: RegistryState, subject: str, version: int | None, deleted: bool) -> SchemaValue:
        versions = state.versions(subject, deleted=True)
        if not versions:
            raise errors.subject_not_found(subject)
        if version is None:
            live = state.versions(subject, deleted=deleted)
            if not live:
                raise errors.version_not_found("latest")
            return live[-1]
        found = state.subjects[subject].get(version)
        if found is None or (found.deleted and not deleted):
            raise errors.version_not_found(version)
        return found

    async def versions(self, subject: str, deleted: bool = False) -> list[int]:
        state = await self.state()
        if not state.versions(subject, deleted=True):
            raise errors.subject_not_found(subject)
        found = [sv.version for sv in state.versions(subject, deleted=deleted)]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    async def schema_by_id(self, schema_id: int) -> SchemaValue:
        state = await self.state()
        found = state.by_id(schema_id)
        if not found:
            raise errors.schema_not_found(schema_id)
        return found[0]

    async def id_versions(self, schema_id: int, deleted: bool = False) -> list[SchemaValue]:
        state = await self.state()
        found = state.by_id(schema_id)
        if not found:
            raise errors.schema_not_found(schema_id)
        return sorted((sv for sv in found if deleted or not sv.deleted), key=lambda sv: (sv.subject, sv.version))

    async def referenced_by(self, subject: str, version_text: str) -> list[int]:
        sv = await self.version(subject, version_text, deleted=True)
        return (await self.state()).referenced_by(subject, sv.version)

    # ------------------------------------------------------------------ deletes

    async def delete_version(self, subject: str, version_text: str, permanent: bool) -> int:
        version = parse_version(version_text)

        def decide(state: RegistryState) -> tuple[list[Record], int]:
            self._writable(state, subject)
            if not state.versions(subject, deleted=True):
                raise errors.subject_not_found(subject)
            if version is None:
                live = state.versions(subject, deleted=permanent)
                if not live:
                    raise errors.version_not_found("latest")
                sv = live[-1]
            else:
                found = state.subjects[subject].get(version)
                if found is None:
                    raise errors.version_not_found(version)
                sv = found
            refs = state.referenced_by(subject, sv.version)
            if refs:
                raise errors.reference_exists(f"One or more references exist to the schema "
                                              f"{{subject={subject},version={sv.version}}}: ids {refs}")
            if permanent:
                if not sv.deleted:
                    raise errors.version_not_soft_deleted(subject, sv.version)
                return [(rec.noop_key(), rec.max_id_value(state.max_id)),
                        (rec.schema_key(subject, sv.version), None)], sv.version
            if sv.deleted:
                raise errors.version_soft_deleted(subject, sv.version)
            gone = SchemaValue(sv.subject, sv.version, sv.id, sv.schema, sv.schema_type, sv.references, True)
            return [(rec.schema_key(subject, sv.version), rec.schema_value(gone))], sv.version

        return await self.store.write(decide)

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        def decide(state: RegistryState) -> tuple[list[Record], list[int]]:
            self._writable(state, subject)
            all_versions = state.versions(subject, deleted=True)
            if not all_versions:
                raise errors.subject_not_found(subject)
            live = [sv for sv in all_versions if not sv.deleted]
            for sv in all_versions:
                refs = state.referenced_by(subject, sv.version)
                if refs and (permanent or not sv.deleted):
                    raise errors.reference_exists(f"One or more references exist to the schema "
                                                  f"{{subject={subject},version={sv.version}}}: ids {refs}")
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                out: list[Record] = [(rec.noop_key(), rec.max_id_value(state.max_id)),
                                     (rec.clear_subject_key(subject), rec.clear_subject_value(subject))]
                out += [(rec.schema_key(subject, sv.version), None) for sv in all_versions]
                if subject in state.configs:
                    out.append((rec.config_key(subject), None))
                if subject in state.modes:
                    out.append((rec.mode_key(subject), None))
                return out, [sv.version for sv in all_versions]
            if not live:
                raise errors.subject_soft_deleted(subject)
            out = [(rec.schema_key(subject, sv.version), rec.schema_value(
                SchemaValue(sv.subject, sv.version, sv.id, sv.schema, sv.schema_type, sv.references, True)))
                for sv in live]
            out.append((rec.delete_subject_key(subject), rec.delete_subject_value(subject, live[-1].version)))
            return out, [sv.version for sv in live]

        return await self.store.write(decide)

    # ------------------------------------------------------------------ compatibility

    async def check(self, subject: str, version_text: str | None, new: NewSchema) -> list[str]:
        """Why ``new`` is incompatible with the version (or, without one, with the versions the
        subject's level names); empty when it is compatible."""
        state = await self.state()
        parsed = await self.parse_new(state, new)
        await self._warm(state, state.live(subject))
        level = self.level(state, subject)
        if version_text is None:
            return compat.check(level, parsed, [self.parsed(state, sv) for sv in state.live(subject)])
        sv = self._version(state, subject, parse_version(version_text), deleted=False)
        if level == "NONE":
            return []
        return compat.check(level.removesuffix("_TRANSITIVE"), parsed, [self.parsed(state, sv)])

    # ------------------------------------------------------------------ config and mode

    async def set_level(self, subject: str | None, level: Any) -> str:
        if not isinstance(level, str) or level.upper() not in compat.LEVELS:
            raise errors.invalid_compatibility(level)
        chosen = level.upper()

        def decide(state: RegistryState) -> tuple[list[Record], str]:
            return [(rec.config_key(subject), rec.config_value(chosen))], chosen

        return await self.store.write(decide)

    async def delete_level(self, subject: str | None) -> str:
        def decide(state: RegistryState) -> tuple[list[Record], str]:
            if subject is not None and subject not in state.configs:
                if not state.versions(subject, deleted=True):
                    raise errors.subject_not_found(subject)
                raise errors.subject_config_not_set(subject)
            previous = self.level(state, subject)
            return ([(rec.config_key(subject), None)] if subject in state.configs else []), previous

        return await self.store.write(decide)

    async def set_mode(self, subject: str | None, mode: Any, force: bool = False) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        chosen = mode.upper()

        def decide(state: RegistryState) -> tuple[list[Record], str]:
            if chosen == "IMPORT" and not force:
                has = state.versions(subject) if subject is not None else any(state.live(s) for s in state.subjects)
                if has:
                    raise errors.not_permitted("Cannot import since found existing subjects")
            return [(rec.mode_key(subject), rec.mode_value(chosen))], chosen

        return await self.store.write(decide)

    async def delete_mode(self, subject: str) -> str:
        def decide(state: RegistryState) -> tuple[list[Record], str]:
            if subject not in state.modes:
                raise errors.subject_mode_not_set(subject)
            previous = state.modes[subject]
            return [(rec.mode_key(subject), None)], previous

        return await self.store.write(decide)


@functools.lru_cache(maxsize=1024)
def _parse_cached(schema_type: str, text: str, refs: tuple[tuple[str, str], ...]) -> ParsedSchema:
    """Stored schemas are parsed again for each compatibility check; a parse depends on its text
    and its references' texts only."""
    return parse(schema_type, text, refs)


@functools.lru_cache(maxsize=1024)
def _printed(serialized: str, refs: tuple[tuple[str, str], ...]) -> str | None:
    """A Protobuf descriptor (base64) as .proto text, if that text is the same schema (the same
    canonical form, so registering it gives the same id)."""
    try:
        text = proto_text.to_text(protobuf.decode(serialized))
        if text is None or _parse_cached("PROTOBUF", text, refs).canonical != _canonical("PROTOBUF", serialized, refs):
            return None
    except InvalidSchema:
        return None
    return text


@functools.cache
def _canonical(schema_type: str, text: str, refs: tuple[tuple[str, str], ...]) -> str:
    """A stored schema's canonical text, which registrations compare with every stored Protobuf
    schema of the same references: kept for each (a Protobuf text takes a protoc run to parse)."""
    return _parse_cached(schema_type, text, refs).canonical


def _parse_all(jobs: list[tuple[str, str, tuple[tuple[str, str], ...]]]) -> None:
    for job in jobs:
        with contextlib.suppress(InvalidSchema):
            _canonical(*job)
