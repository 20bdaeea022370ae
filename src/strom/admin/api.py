"""The JSON REST API behind the web console (all under /api/).

GET  /api/overview                          broker, counts, throughput totals
GET  /api/cluster                           brokers, controller, under-replicated and offline partitions
GET  /api/topics                            topics with partitions, offsets, sizes
POST /api/topics                            {"name", "partitions", "replication_factor", "configs"}
GET  /api/topics/{topic}                    one topic with its partitions
DELETE /api/topics/{topic}
GET  /api/topics/{topic}/messages           ?partition=&limit=&offset= | &timestamp= (ms or ISO 8601)
GET  /api/groups                            groups with state, members and total lag
GET  /api/groups/{group}                    members, assignment, committed offsets and lag
GET  /api/transactions                      transactional ids this broker coordinates (open ones first),
                                            hanging transactions on its partitions, counters
GET  /api/transactions/{transactional_id}   one transactional id
GET  /api/topics/{topic}/producers          each partition's producers (DescribeProducers) and its LSO
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from strom.admin import login, snapshot
from strom.broker.topics import TopicError
from strom.clock import now_ms
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from strom.storage.log import OffsetOutOfRange

if TYPE_CHECKING:
    from strom.admin.view import BrokerView
    from strom.broker.server import Broker

BROKER_KEY: web.AppKey[Any] = web.AppKey("broker", object)
VIEW_KEY: web.AppKey[Any] = web.AppKey("view", object)  # the broker's BrokerView, for snapshot's reads
HISTORY_KEY: web.AppKey[Any] = web.AppKey("history", object)


def _broker(request: web.Request) -> Broker:
    broker: Broker = request.app[BROKER_KEY]
    return broker


def _view(request: web.Request) -> BrokerView:
    view: BrokerView = request.app[VIEW_KEY]
    return view


def _error(status: int, message: str, code: int | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if code is not None:
        body["error_code"] = code
    return web.json_response(body, status=status)


def _refused(request: web.Request, operation: AclOperation, resource_type: ResourceType,
             name: str) -> web.Response | None:
    """403 when the authorizer refuses the request's principal what Kafka's matching request needs."""
    acls = _broker(request).acls
    if not acls.enabled:
        return None
    ctx = login.context(request, f"{request.method} {request.path}")
    if acls.allowed(ctx, operation, resource_type, name):
        return None
    return _error(403, f"{ctx.principal} may not {operation.name} {resource_type.name.lower()} '{name}'",
                  {ResourceType.TOPIC: E.topic_authorization_failed, ResourceType.GROUP: E.group_authorization_failed,
                   ResourceType.TRANSACTIONAL_ID: E.transactional_id_authorization_failed,
                   }.get(resource_type, E.cluster_authorization_failed))


def _visible(request: web.Request, resource_type: ResourceType, names: list[str],
             operation: AclOperation = AclOperation.DESCRIBE) -> set[str]:
    """The names the request's principal may describe (all of them without an authorizer)."""
    acls = _broker(request).acls
    if not acls.enabled:
        return set(names)
    ctx = login.context(request, f"{request.method} {request.path}")
    return set(names) - acls.denied(ctx, operation, resource_type, names, audit_denial=False)


def _require_ready(view: BrokerView) -> web.Response | None:
    ready, reason = snapshot.is_ready(view)
    return None if ready else _error(503, f"broker not ready: {reason}")


Handler = Callable[[web.Request, "Broker"], Awaitable[web.StreamResponse]]


def endpoint(*, ready: bool = True, acl: tuple[AclOperation, ResourceType, str | None] | None = None
             ) -> Callable[[Handler], Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """The checks a REST handler starts with: 503 while the broker is not ready (unless ``ready`` is
    false), then 403 unless the caller may do ``acl``'s operation on the resource the path's
    ``{match}`` names (the cluster when the match is None). The handler gets the broker as well."""
    def wrap(fn: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @functools.wraps(fn)
        async def handler(request: web.Request) -> web.StreamResponse:
            broker = _broker(request)
            if ready and (refused := _require_ready(_view(request))) is not None:
                return refused
            if acl is not None:
                operation, resource_type, match = acl
                name = CLUSTER_NAME if match is None else request.match_info[match]
                if (refused := _refused(request, operation, resource_type, name)) is not None:
                    return refused
            return await fn(request, broker)
        return handler
    return wrap


def _int_arg(request: web.Request, name: str, default: int | None = None) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f'{{"error": "{name} must be an integer"}}',
                                 content_type="application/json") from None


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it names a zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


@endpoint(ready=False, acl=(AclOperation.DESCRIBE, ResourceType.CLUSTER, None))
async def overview(request: web.Request, broker: Broker) -> web.StreamResponse:
    return web.json_response(snapshot.overview(_view(request), request.app[HISTORY_KEY]))


@endpoint(acl=(AclOperation.DESCRIBE, ResourceType.CLUSTER, None))
async def cluster(request: web.Request, broker: Broker) -> web.StreamResponse:
    return web.json_response(snapshot.cluster_view(_view(request)))


@endpoint()
async def list_topics(request: web.Request, broker: Broker) -> web.StreamResponse:
    topics = snapshot.topics_view(_view(request))
    shown = _visible(request, ResourceType.TOPIC, [t["name"] for t in topics])
    return web.json_response({"topics": [t for t in topics if t["name"] in shown]})


@endpoint(acl=(AclOperation.DESCRIBE, ResourceType.TOPIC, "topic"))
async def get_topic(request: web.Request, broker: Broker) -> web.StreamResponse:
    view = snapshot.topic_view(_view(request), request.match_info["topic"], with_partitions=True)
    if view is None:
        return _error(404, f"topic '{request.match_info['topic']}' does not exist", E.unknown_topic_or_partition)
    return web.json_response(view)


@endpoint()
async def create_topic(request: web.Request, broker: Broker) -> web.StreamResponse:
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "the body must be a JSON object")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return _error(400, 'the body must be a JSON object with a "name"')
    try:
        partitions = int(body.get("partitions", -1))
        rf = int(body.get("replication_factor", -1))
    except (TypeError, ValueError):
        return _error(400, "partitions and replication_factor must be integers")
    configs = body.get("configs") or {}
    if not isinstance(configs, dict):
        return _error(400, "configs must be an object of name: value")
    # As CreateTopics: CREATE on the cluster, or else CREATE on the topic.
    acls = broker.acls
    if (acls.enabled and not acls.cluster_allowed(login.context(request, "POST /api/topics"), AclOperation.CREATE,
                                                  audit_denial=False)
            and (refused := _refused(request, AclOperation.CREATE, ResourceType.TOPIC, body["name"])) is not None):
        return refused
    try:
        await broker.topics.create_async(body["name"], partitions, rf, {str(k): str(v) for k, v in configs.items()})
    except TopicError as e:
        status = 409 if e.error_code == 36 else 400
        return _error(status, e.message, e.error_code)
    return web.json_response(snapshot.topic_view(_view(request), body["name"], with_partitions=True), status=201)


@endpoint(acl=(AclOperation.DELETE, ResourceType.TOPIC, "topic"))
async def delete_topic(request: web.Request, broker: Broker) -> web.StreamResponse:
    name = request.match_info["topic"]
    if not broker.config.delete_topic_enable:
        return _error(403, "delete.topic.enable is false", E.topic_deletion_disabled)
    info = broker.metadata.get_topic(name)
    if info is not None and info.internal:
        return _error(403, f"'{name}' is an internal topic", E.invalid_topic_exception)
    try:
        broker.topics.delete(name)
    except TopicError as e:
        return _error(404 if e.error_code == E.unknown_topic_or_partition else 400, e.message, e.error_code)
    return web.json_response({"deleted": name})


@endpoint(acl=(AclOperation.READ, ResourceType.TOPIC, "topic"))
async def messages(request: web.Request, broker: Broker) -> web.StreamResponse:
    topic = request.match_info["topic"]
    partition = _int_arg(request, "partition") or 0
    plog = broker.log_manager.get_log(topic, partition)
    if plog is None:
        return _error(404, f"no partition {topic}-{partition}", E.unknown_topic_or_partition)
    query = snapshot.MessageQuery(limit=_int_arg(request, "limit", 50) or 50, offset=_int_arg(request, "offset"))
    ts = request.query.get("timestamp", "").strip()
    if ts:
        try:
            query.timestamp = parse_timestamp(ts)
        except ValueError:
            return _error(400, "timestamp must be milliseconds since the epoch or an ISO 8601 time")
    try:
        result = snapshot.read_messages(plog, query)
    except OffsetOutOfRange as e:  # retention moved the start meanwhile
        return _error(409, str(e), E.offset_out_of_range)
    return web.json_response(result)


@endpoint()
async def list_groups(request: web.Request, broker: Broker) -> web.StreamResponse:
    out = []
    groups = snapshot.list_groups(_view(request))
    shown = _visible(request, ResourceType.GROUP, [g.group_id for g in groups])
    for g in groups:
        if g.group_id not in shown:
            continue
        view = snapshot.group_view(_view(request), g.group_id, detail=False)
        if view is not None:
            out.append(view)
    return web.json_response({"groups": out})


@endpoint(acl=(AclOperation.DESCRIBE, ResourceType.GROUP, "group"))
async def get_group(request: web.Request, broker: Broker) -> web.StreamResponse:
    view = snapshot.group_view(_view(request), request.match_info["group"], detail=True)
    if view is None:
        return _error(404, f"group '{request.match_info['group']}' does not exist", E.group_id_not_found)
    return web.json_response(view)


@endpoint()
async def list_transactions(request: web.Request, broker: Broker) -> web.StreamResponse:
    """As ListTransactions (ids the principal may DESCRIBE) plus hanging transactions on topics it
    may READ (what DescribeProducers needs, which kafka-transactions.sh find-hanging uses)."""
    now = now_ms()
    txns = snapshot.transactions(_view(request), now)
    shown = _visible(request, ResourceType.TRANSACTIONAL_ID, [t["transactional_id"] for t in txns])
    hanging = snapshot.hanging_transactions(_view(request), now)
    readable = _visible(request, ResourceType.TOPIC, sorted({h["topic"] for h in hanging}), AclOperation.READ)
    hanging = [h for h in hanging if h["topic"] in readable]
    for h in hanging:
        if h["transactional_id"] not in shown:
            h["transactional_id"] = None
    return web.json_response({
        "transactions": [t for t in txns if t["transactional_id"] in shown],
        "hanging": hanging,
        "max_timeout_ms": broker.config.transaction_max_timeout_ms,
        # False in a cluster where other brokers coordinate some ids: hanging ones are then only
        # those past the max timeout.
        "coordinates_all": snapshot.coordinates_every_transaction(_view(request)),
        "counters": snapshot.transaction_counters(_view(request)),
        "time": now,
    })


@endpoint(acl=(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "transactional_id"))
async def get_transaction(request: web.Request, broker: Broker) -> web.StreamResponse:
    txn_id = request.match_info["transactional_id"]
    view = snapshot.transaction(_view(request), txn_id, now_ms())
    if view is None:
        return _error(404, f"transactional id '{txn_id}' is not coordinated here or does not exist",
                      E.transactional_id_not_found)
    return web.json_response(view)


@endpoint(acl=(AclOperation.READ, ResourceType.TOPIC, "topic"))
async def topic_producers(request: web.Request, broker: Broker) -> web.StreamResponse:
    topic = request.match_info["topic"]
    partitions = snapshot.producers_view(_view(request), topic)
    if partitions is None:
        return _error(404, f"topic '{topic}' does not exist", E.unknown_topic_or_partition)
    return web.json_response({"topic": topic, "partitions": partitions, "time": now_ms()})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/cluster", cluster)
    app.router.add_get("/api/topics", list_topics)
    app.router.add_post("/api/topics", create_topic)
    app.router.add_get("/api/topics/{topic}", get_topic)
    app.router.add_delete("/api/topics/{topic}", delete_topic)
    app.router.add_get("/api/topics/{topic}/messages", messages)
    app.router.add_get("/api/topics/{topic}/producers", topic_producers)
    app.router.add_get("/api/groups", list_groups)
    app.router.add_get("/api/groups/{group}", get_group)
    app.router.add_get("/api/transactions", list_transactions)
    app.router.add_get("/api/transactions/{transactional_id}", get_transaction)
