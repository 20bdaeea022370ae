"""AlterShareGroupOffsets (91): set the start offset of share partitions of an empty share group
(KIP-932; ``strom groups reset-offsets`` for a share group). Each share partition's state starts
afresh at the given offset at the share coordinator of its key, wherever that is (Kafka's
InitializeShareGroupState through the persister), at a state epoch of the group's epoch: a leader
that still keeps the share partition from before is fenced (FENCED_STATE_EPOCH) and reads it anew.
Leaders drop the share partitions of a group once it has no share session with them (Kafka's
onGroupEmpty), so the next ShareFetch delivers from the new start on. The partitions initialized
are recorded in the group (ShareGroupStatePartitionMetadata), as Kafka's
completeAlterShareGroupOffsets does.

READ on the group (else GROUP_AUTHORIZATION_FAILED); the group must be a share group
(GROUP_ID_NOT_FOUND) with no members (NON_EMPTY_GROUP). Per partition: TOPIC_AUTHORIZATION_FAILED
without READ on its topic, UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_offsets import offsets_change
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0


def _response(error: E, message: str | None, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "responses": topics}


def _topic(name: str, topic_id: uuid.UUID | None, errors: list[tuple[int, E]]) -> dict[str, Any]:
    return {"topic_name": name, "topic_id": topic_id or uuid.UUID(int=0),
            "partitions": [{"partition_index": p, "error_code": e, "error_message": None} for p, e in errors]}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    group_id = request.group_id
    change = offsets_change(broker, ctx, group_id, AclOperation.READ)
    if isinstance(change, E):
        return _response(change, None, [])
    coord, persister, manager = change.coordinator, change.persister, change.partitions
    denied = set(acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in request.topics])) \
        if acls.enabled else set()
    refused: list[dict[str, Any]] = []
    wanted: list[tuple[Any, Any]] = []
    for t in request.topics:
        info = broker.metadata.get_topic(t.topic_name)
        if t.topic_name in denied:
            refused.append(_topic(t.topic_name, None, [(p.partition_index, E.topic_authorization_failed)
                                                       for p in t.partitions]))
        elif info is None:
            refused.append(_topic(t.topic_name, None, [(p.partition_index, E.unknown_topic_or_partition)
                                                       for p in t.partitions]))
        else:
            wanted.append((t, info))
    group_error, message = coord.share_offsets_error(group_id)
    if group_error is not E.none:
        return _response(group_error, message, refused)
    state_epoch = max(coord.describe_share_group(group_id).group_epoch, 0)
    done: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
    topics = []
    for t, info in wanted:
        valid = [p for p in t.partitions if 0 <= p.partition_index < info.partitions]
        results = dict(zip([p.partition_index for p in valid], await asyncio.gather(*(
            persister.initialize_state(group_id, info.topic_id, p.partition_index, state_epoch, p.start_offset)
            for p in valid)), strict=True))
        errors = []
        for p in t.partitions:
            e = results.get(p.partition_index, E.unknown_topic_or_partition)
            if e is E.none:
                manager.forget(group_id, info.topic_id, p.partition_index)
                name, parts = done.get(info.topic_id, (info.name, frozenset()))
                done[info.topic_id] = (name, parts | {p.partition_index})
            errors.append((p.partition_index, e))
        topics.append(_topic(info.name, info.topic_id, errors))
    if done:
        await coord.share_change_initialized(group_id, done, set())
    return _response(E.none, None, topics + refused)
