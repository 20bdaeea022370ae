"""The console's schemas page: the schema registry's subjects, versions, schema texts, compatibility
levels and modes, read straight from the broker's registry (``SchemaReader``: the registry's state
and the rules it applies for levels and modes), not over HTTP to the registry's own listener.

    GET /api/schemas              subjects (soft-deleted ones marked), their latest version, levels
    GET /api/schemas/{subject}    every version of a subject, with its schema text and references

Without schema.registry.listeners both answer {"enabled": false}. Like the registry itself, these
apply no Kafka ACLs: whoever may log in to the console sees them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from strom.registry.records import SchemaValue
    from strom.registry.state import RegistryState


class SchemaReader(Protocol):
    """What the page reads of the registry (strom.registry.ops.Registry offers it)."""

    async def state(self) -> RegistryState: ...
    def level(self, state: RegistryState, subject: str | None) -> str: ...
    def mode(self, state: RegistryState, subject: str | None) -> str: ...


READER_KEY: web.AppKey[Callable[[], SchemaReader | None]] = web.AppKey("schema_reader", object)  # type: ignore[arg-type]


def _version(sv: SchemaValue, with_schema: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"version": sv.version, "id": sv.id, "type": sv.schema_type, "deleted": sv.deleted}
    if with_schema:
        out["schema"] = _pretty(sv.schema, sv.schema_type)
        out["references"] = [r.to_json() for r in sv.references]
    return out


def _pretty(text: str, schema_type: str) -> str:
    if schema_type == "PROTOBUF":
        return text  # .proto text, or the serialized FileDescriptorProto (base64), as registered
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


def subjects_view(reader: SchemaReader, state: RegistryState) -> dict[str, Any]:
    subjects = []
    for subject in sorted(state.subjects):
        versions = [sv for _, sv in sorted(state.subjects[subject].items())]
        live = [sv for sv in versions if not sv.deleted]
        latest = live[-1] if live else None
        subjects.append({
            "subject": subject, "versions": [v.version for v in live], "deleted": not live,
            "soft_deleted_versions": [v.version for v in versions if v.deleted],
            "latest": _version(latest, False) if latest is not None else None,
            "compatibility": reader.level(state, subject), "own_compatibility": state.configs.get(subject),
            "mode": reader.mode(state, subject),
        })
    return {"enabled": True, "compatibility": reader.level(state, None), "mode": reader.mode(state, None),
            "schemas": len({sv.id for vs in state.subjects.values() for sv in vs.values()}), "subjects": subjects}


def subject_view(reader: SchemaReader, state: RegistryState, subject: str) -> dict[str, Any] | None:
    versions = state.subjects.get(subject)
    if not versions:
        return None
    return {"enabled": True, "subject": subject, "compatibility": reader.level(state, subject),
            "own_compatibility": state.configs.get(subject), "mode": reader.mode(state, subject),
            "versions": [_version(sv, True) for _, sv in sorted(versions.items(), reverse=True)]}


async def _state(request: web.Request) -> tuple[SchemaReader | None, RegistryState | None, web.Response | None]:
    reader = request.app[READER_KEY]()
    if reader is None:
        return None, None, web.json_response({"enabled": False})
    try:
        state = await reader.state()
    except Exception as e:  # still loading _schemas, or it cannot be read
        return None, None, web.json_response({"enabled": True, "error": f"the schema registry cannot be read: {e}"},
                                             status=503)
    return reader, state, None


async def list_schemas(request: web.Request) -> web.StreamResponse:
    reader, state, answer = await _state(request)
    if answer is not None:
        return answer
    assert reader is not None and state is not None
    return web.json_response(subjects_view(reader, state))


async def get_subject(request: web.Request) -> web.StreamResponse:
    reader, state, answer = await _state(request)
    if answer is not None:
        return answer
    assert reader is not None and state is not None
    subject = request.match_info["subject"]
    view = subject_view(reader, state, subject)
    if view is None:
        return web.json_response({"error": f"subject '{subject}' not found", "error_code": 40401}, status=404)
    return web.json_response(view)


def add_routes(app: web.Application, reader: Callable[[], SchemaReader | None]) -> None:
    app[READER_KEY] = reader
    app.router.add_get("/api/schemas", list_schemas)
    app.router.add_get("/api/schemas/{subject}", get_subject)
