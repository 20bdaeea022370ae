"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.topics import TopicError, refuse_excessive_partitions
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    checked: list[tuple[Any, TopicError | None]] = []
    added = 0  # the partitions the request would create, over the topics that may grow (first named)
    counted: set[str] = set()
    for t in request.topics:
        try:
            if not broker.acls.allowed(ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise TopicError(E.topic_authorization_failed, f"Not authorized to alter topic '{t.name}'.")
            info = broker.metadata.get_topic(t.name)
            if info is None:
                raise TopicError(E.unknown_topic_or_partition, f"Topic '{t.name}' does not exist.")
            if t.count <= info.partitions:
                raise TopicError(E.invalid_partitions,
                                 f"Topic currently has {info.partitions} partitions, which is higher than or "
                                 f"equal to the requested {t.count}.")
            if t.name not in counted:
                counted.add(t.name)
                added += t.count - info.partitions
            checked.append((t, None))
        except TopicError as e:
            checked.append((t, e))
    try:
        refuse_excessive_partitions(added)  # validate_only too: the whole request, before anything is made
    except TopicError as e:
        return {"throttle_time": 0, "results": [{"name": t.name, "error_code": e.error_code,
                                                 "error_message": e.message} for t in request.topics]}
    results = []
    for t, error in checked:
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if error is not None:
                raise error
            if not request.validate_only:
                await broker.topics.add_partitions(t.name, t.count)  # checks again once its turn comes
        except TopicError as e:
            entry.update(error_code=e.error_code, error_message=e.message)
        results.append(entry)
    return {"throttle_time": 0, "results": results}
