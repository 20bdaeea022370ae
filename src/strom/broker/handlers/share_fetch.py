"""ShareFetch (78): fetch records for a member of a share group (KIP-932), acknowledging what it
had, in one share session (strom.share). The records go out as stored, with the offsets acquired
for this member and their delivery counts; a fetch that finds nothing waits for new or released
records up to its max wait. v1 is what librdkafka 2.16 sends."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_acknowledge import acks_of, leader_of
from strom.protocol import splice
from strom.protocol.errors import ErrorCode as E
from strom.protocol.splice import BlobSplicer
from strom.security.acl import AclOperation, ResourceType
from strom.share.share_session import SharePartitionKey

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 1


def _error(error: E, message: str | None = None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "acquisition_lock_timeout": 0,
            "responses": [], "node_endpoints": [], splice.RESULT_KEY: BlobSplicer()}


def handle(broker: Broker, ctx: RequestContext, request: Any) -> Awaitable[dict[str, Any]] | dict[str, Any]:
    manager = broker.share_manager
    if manager is None:
        return _error(E.coordinator_not_available)
    if not request.group_id or not request.member_id:
        return _error(E.invalid_request, "GroupId and MemberId must be set")
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _error(E.group_authorization_failed)
    add: list[SharePartitionKey] = []
    for t in request.topics:
        for p in t.partitions:
            if t.topic_id is not None and (t.topic_id, p.partition_index) not in add:
                add.append((t.topic_id, p.partition_index))
    names = {t: broker.metadata.topic_by_id(t) for t, _ in add}
    denied = set(broker.acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC,
                                    {i.name for i in names.values() if i is not None})) if broker.acls.enabled else set()
    refused = {k for k in add if (i := names[k[0]]) is not None and i.name in denied}
    forget = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions if t.topic_id is not None]
    return _fetch(broker, ctx, request, [k for k in add if k not in refused], refused, forget)


async def _fetch(broker: Broker, ctx: RequestContext, request: Any, add: list[SharePartitionKey],
                 refused: set[SharePartitionKey], forget: list[SharePartitionKey]) -> dict[str, Any]:
    manager = broker.share_manager
    assert manager is not None
    acks = {k: v for k, v in acks_of(request.topics).items() if k not in refused}
    out = await manager.share_fetch(request.group_id, request.member_id, request.share_session_epoch,
                                    ctx.connection_id, add, acks, forget, request.max_wait.total_seconds(),
                                    request.max_bytes, request.max_records)
    if out.error is not E.none:
        return _error(out.error, out.message)
    blobs = BlobSplicer()
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for key in refused:
        by_topic.setdefault(key[0], []).append(_partition(broker, key[1], E.topic_authorization_failed, E.none,
                                                          blobs.hold(b""), [], -1))
    for (topic_id, partition), r in out.partitions.items():
        by_topic.setdefault(topic_id, []).append(_partition(
            broker, partition, r.error, r.ack_error, blobs.hold(r.records),
            [{"first_offset": a.first_offset, "last_offset": a.last_offset, "delivery_count": a.delivery_count}
             for a in r.acquired], r.leader_epoch))
    return {"throttle_time": 0, "error_code": E.none, "error_message": None, "acquisition_lock_timeout": out.lock_ms,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()], "node_endpoints": [],
            splice.RESULT_KEY: blobs}


def _partition(broker: Broker, partition: int, error: E, ack_error: E, records: Any, acquired: list[dict[str, Any]],
               leader_epoch: int) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": error, "error_message": None,
            "acknowledge_error_code": ack_error, "acknowledge_error_message": None,
            "current_leader": leader_of(broker, leader_epoch), "records": records, "acquired_records": acquired}
