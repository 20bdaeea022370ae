"""The REST API, Confluent's paths and bodies (docs/schema-registry.md lists them), as an aiohttp
application. Errors are ``{"error_code", "message"}`` with Confluent's codes; boolean query
parameters are read as Confluent reads them (``true`` in any case, so the Python client's ``True``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from strom.registry import errors
from strom.registry.formats.parse import SCHEMA_TYPES
from strom.registry.ops import NewSchema, Registry, schema_json

REGISTRY_KEY: web.AppKey[Registry] = web.AppKey("registry", Registry)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 * 1024 * 1024  # a schema with its references can be large; Confluent has no small cap

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _answer(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.RegistryError as e:
        return _answer(e.body(), e.status)
    except web.HTTPException as e:
        if e.status >= 400:  # aiohttp's own (404 unknown path, 405, 413): in Confluent's shape too
            return _answer({"error_code": e.status, "message": e.reason}, e.status)
        raise


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


async def _body(request: web.Request) -> Any:
    try:
        # Any content type: the clients send application/vnd.schemaregistry.v1+json or application/json.
        return json.loads(await request.text())
    except ValueError:
        raise errors.bad_request("the body is not JSON") from None


def _id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise errors.schema_not_found() from None


def _registry(request: web.Request) -> Registry:
    return request.app[REGISTRY_KEY]


# ---------------------------------------------------------------- handlers


async def root(request: web.Request) -> web.Response:
    return _answer({})


async def schema_types(request: web.Request) -> web.Response:
    return _answer(list(SCHEMA_TYPES))


async def get_schema(request: web.Request) -> web.Response:
    sv = await _registry(request).schema_by_id(_id(request))
    out: dict[str, Any] = {}
    if sv.schema_type != "AVRO":
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = [r.to_json() for r in sv.references]
    out["schema"] = await _registry(request).render(sv, request.query.get("format"))
    return _answer(out)


async def get_schema_text(request: web.Request) -> web.Response:
    sv = await _registry(request).schema_by_id(_id(request))
    return web.Response(text=await _registry(request).render(sv, request.query.get("format")),
                        content_type="application/json")


async def id_subjects(request: web.Request) -> web.Response:
    found = await _registry(request).id_versions(_id(request), _flag(request, "deleted"))
    return _answer(sorted({sv.subject for sv in found}))


async def id_versions(request: web.Request) -> web.Response:
    found = await _registry(request).id_versions(_id(request), _flag(request, "deleted"))
    return _answer([{"subject": sv.subject, "version": sv.version} for sv in found])


async def list_schemas(request: web.Request) -> web.Response:
    registry = _registry(request)
    state = await registry.state()
    prefix = request.query.get("subjectPrefix", "")
    deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
    out = []
    for subject in sorted(s for s in state.subjects if s.startswith(prefix)):
        versions = state.versions(subject, deleted)
        out += [schema_json(sv) for sv in (versions[-1:] if latest_only else versions)]
    return _answer(out)


async def subjects(request: web.Request) -> web.Response:
    return _answer(await _registry(request).subjects(request.query.get("subjectPrefix", ""),
                                                     _flag(request, "deleted")))


async def versions(request: web.Request) -> web.Response:
    return _answer(await _registry(request).versions(request.match_info["subject"], _flag(request, "deleted")))


async def register(request: web.Request) -> web.Response:
    new = NewSchema.from_body(await _body(request))
    answer = await _registry(request).register(request.match_info["subject"], new, _flag(request, "normalize"))
    return _answer({"id": answer["id"]})


async def lookup(request: web.Request) -> web.Response:
    new = NewSchema.from_body(await _body(request))
    return _answer(await _registry(request).lookup(request.match_info["subject"], new, _flag(request, "deleted")))


async def get_version(request: web.Request) -> web.Response:
    sv = await _registry(request).version(request.match_info["subject"], request.match_info["version"],
                                          _flag(request, "deleted"))
    return _answer(schema_json(sv, text=await _registry(request).render(sv, request.query.get("format"))))


async def get_version_schema(request: web.Request) -> web.Response:
    sv = await _registry(request).version(request.match_info["subject"], request.match_info["version"],
                                          _flag(request, "deleted"))
    return web.Response(text=await _registry(request).render(sv, request.query.get("format")),
                        content_type="application/json")


async def referenced_by(request: web.Request) -> web.Response:
    return _answer(await _registry(request).referenced_by(request.match_info["subject"],
                                                          request.match_info["version"]))


async def delete_version(request: web.Request) -> web.Response:
    return _answer(await _registry(request).delete_version(request.match_info["subject"],
                                                           request.match_info["version"],
                                                           _flag(request, "permanent")))


async def delete_subject(request: web.Request) -> web.Response:
    return _answer(await _registry(request).delete_subject(request.match_info["subject"],
                                                           _flag(request, "permanent")))


async def compatibility(request: web.Request) -> web.Response:
    new = NewSchema.from_body(await _body(request))
    problems = await _registry(request).check(request.match_info["subject"], request.match_info.get("version"), new)
    out: dict[str, Any] = {"is_compatible": not problems}
    if _flag(request, "verbose"):
        out["messages"] = problems
    return _answer(out)


def _subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def get_config(request: web.Request) -> web.Response:
    registry = _registry(request)
    state = await registry.state()
    subject = _subject(request)
    if subject is not None and subject not in state.configs and not _flag(request, "defaultToGlobal"):
        raise errors.subject_config_not_set(subject)
    return _answer({"compatibilityLevel": registry.level(state, subject)})


async def put_config(request: web.Request) -> web.Response:
    body = await _body(request)
    level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
    return _answer({"compatibility": await _registry(request).set_level(_subject(request), level)})


async def delete_config(request: web.Request) -> web.Response:
    return _answer({"compatibilityLevel": await _registry(request).delete_level(_subject(request))})


async def get_mode(request: web.Request) -> web.Response:
    registry = _registry(request)
    state = await registry.state()
    subject = _subject(request)
    if subject is not None and subject not in state.modes and not _flag(request, "defaultToGlobal"):
        raise errors.subject_mode_not_set(subject)
    return _answer({"mode": registry.mode(state, subject)})


async def put_mode(request: web.Request) -> web.Response:
    body = await _body(request)
    mode = body.get("mode") if isinstance(body, dict) else None
    return _answer({"mode": await _registry(request).set_mode(_subject(request), mode, _flag(request, "force"))})


async def delete_mode(request: web.Request) -> web.Response:
    subject = _subject(request)
    assert subject is not None
    return _answer({"mode": await _registry(request).delete_mode(subject)})


def make_app(registry: Registry, middlewares: Sequence[Any] = (), forward: Any = None) -> web.Application:
    """``middlewares``: the listener's own (Host checks, logins), run before the API's; ``forward``:
    the one that sends writes on to the registry of the broker leading ``_schemas`` (forward.py)."""
    inner = [forward] if forward is not None else []
    app = web.Application(middlewares=[*middlewares, _errors, *inner], client_max_size=MAX_BODY_BYTES)
    app[REGISTRY_KEY] = registry
    r = app.router
    r.add_get("/", root)
    r.add_get("/schemas", list_schemas)
    r.add_get("/schemas/types", schema_types)
    r.add_get("/schemas/ids/{id}", get_schema)
    r.add_get("/schemas/ids/{id}/schema", get_schema_text)
    r.add_get("/schemas/ids/{id}/subjects", id_subjects)
    r.add_get("/schemas/ids/{id}/versions", id_versions)
    r.add_get("/subjects", subjects)
    r.add_post("/subjects/{subject}", lookup)
    r.add_delete("/subjects/{subject}", delete_subject)
    r.add_get("/subjects/{subject}/versions", versions)
    r.add_post("/subjects/{subject}/versions", register)
    r.add_get("/subjects/{subject}/versions/{version}", get_version)
    r.add_delete("/subjects/{subject}/versions/{version}", delete_version)
    r.add_get("/subjects/{subject}/versions/{version}/schema", get_version_schema)
    r.add_get("/subjects/{subject}/versions/{version}/referencedby", referenced_by)
    r.add_post("/compatibility/subjects/{subject}/versions/{version}", compatibility)
    r.add_post("/compatibility/subjects/{subject}/versions", compatibility)
    for path in ("/config", "/config/{subject}"):
        r.add_get(path, get_config)
        r.add_put(path, put_config)
        r.add_delete(path, delete_config)
    for path in ("/mode", "/mode/{subject}"):
        r.add_get(path, get_mode)
        r.add_put(path, put_mode)
    r.add_delete("/mode/{subject}", delete_mode)
    return app
