"""DeleteShareGroupOffsets (92): forget the share partitions' state of whole topics for an empty
share group (KIP-932; ``strom groups delete-offsets`` for a share group). The share coordinator of
each partition's key, wherever that is, deletes its state (Kafka's DeleteShareGroupState through
the persister: tombstones in __share_group_state); the next ShareFetch starts the share partition
again where share.auto.offset.reset says.

DELETE on the group (else GROUP_AUTHORIZATION_FAILED); the group must be a share group
(GROUP_ID_NOT_FOUND) with no members (NON_EMPTY_GROUP). Per topic: TOPIC_AUTHORIZATION_FAILED
without READ on it, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_offsets import delete_share_state, offsets_change
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0


def _response(error: E, message: str | None, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "responses": topics}


def _topic(name: str, topic_id: uuid.UUID | None, error: E) -> dict[str, Any]:
    return {"topic_name": name, "topic_id": topic_id or uuid.UUID(int=0), "error_code": error,
            "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    group_id = request.group_id
    change = offsets_change(broker, ctx, group_id, AclOperation.DELETE)
    if isinstance(change, E):
        return _response(change, None, [])
    coord = change.coordinator
    names = [t.topic_name for t in request.topics]
    denied = set(acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, names)) if acls.enabled else set()
    refused: list[dict[str, Any]] = []
    wanted = []
    for name in dict.fromkeys(names):
        info = broker.metadata.get_topic(name)
        if name in denied:
            refused.append(_topic(name, None, E.topic_authorization_failed))
        elif info is None:
            refused.append(_topic(name, None, E.unknown_topic_or_partition))
        else:
            wanted.append(info)
    group_error, message = coord.share_offsets_error(group_id)
    if group_error is not E.none:
        return _response(group_error, message, refused)
    initialized = coord.share_initialized(group_id) or {}
    deleted: set[uuid.UUID] = set()
    topics = []
    for info in wanted:
        parts = sorted(initialized.get(info.topic_id, frozenset()) | set(range(info.partitions)))
        errors = await delete_share_state(change, group_id, [(info.topic_id, p) for p in parts])
        topic_error = next((e for e in errors.values() if e is not E.none), E.none)
        if topic_error is E.none:
            deleted.add(info.topic_id)
        topics.append(_topic(info.name, info.topic_id, topic_error))
    if deleted:
        await coord.share_change_initialized(group_id, {}, deleted)
    return _response(E.none, None, topics + refused)
