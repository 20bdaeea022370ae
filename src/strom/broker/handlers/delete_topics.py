"""DeleteTopics (20): removes metadata at once and the data asynchronously."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.topics import TopicError
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    requested: dict[str, dict[str, Any]] = {}  # in a cluster: deletions asked of the controller
    for name, topic_id in wanted:
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        if name is None and topic_id is not None:
            info = broker.metadata.topic_by_id(topic_id)
            if info is None:
                entry.update(error_code=E.unknown_topic_id, error_message="unknown topic id")
                results.append(entry)
                continue
            name = info.name
            entry["name"] = name
        if not broker.acls.allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, name or ""):
            entry.update(error_code=E.topic_authorization_failed, error_message=None)
        elif not broker.config.delete_topic_enable:
            entry.update(error_code=E.topic_deletion_disabled, error_message="delete.topic.enable is false")
        else:
            try:
                info = broker.metadata.get_topic(name or "")
                if info is not None:
                    entry["topic_id"] = info.topic_id
                broker.topics.delete(name or "")
                if broker.cluster is not None:
                    requested[name or ""] = entry
            except TopicError as e:
                entry.update(error_code=e.error_code, error_message=e.message)
        results.append(entry)
    if requested:
        # All asked first, then waited for together: the controller deletes them in one pass. A
        # timeout of 0 (confluent-kafka's default) is Kafka's "answer at once"; strom still waits,
        # bounded, so a re-create right after the answer finds the name free.
        timeout_s = request.timeout.total_seconds()  # kio: a timedelta
        left = await broker.topics.wait_deleted(list(requested), timeout_s if timeout_s > 0 else 30.0)
        for name in left if timeout_s > 0 else ():
            requested[name].update(error_code=E.request_timed_out,
                                   error_message=f"Topic '{name}' is marked for deletion; not deleted yet.")
    return {"throttle_time": 0, "responses": results}
