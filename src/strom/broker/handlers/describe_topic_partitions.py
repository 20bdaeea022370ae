"""DescribeTopicPartitions (75): the partitions of topics, a page at a time (KIP-966).

What Metadata says of a topic's partitions (leader, epoch, replicas, ISR, offline replicas), for the
topics named or, with none named, every topic the principal may describe, in name order. At most
ResponsePartitionLimit partitions come in one answer (capped at Kafka's
max.request.partition.size.limit default, 2000); when more are left, NextCursor names the topic and
partition where the next request starts, and a request's Cursor starts the answer there (the topics
before the cursor's are left out, and of the cursor's topic the partitions before its index).
strom has no eligible leader replicas (KIP-966's ELR needs KRaft's controller): both ELR lists are
empty. The authorized operations on each topic are always given, as Kafka gives them here.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.metadata import describable_topics, topic_entry
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit (default)
_ZERO_ID = uuid.UUID(int=0)


def _error_entry(name: str, error: E) -> dict[str, Any]:
    return {"error_code": error, "name": name, "topic_id": _ZERO_ID, "is_internal": False, "partitions": []}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    cursor = request.cursor
    start_name = cursor.topic_name if cursor is not None else None
    start_partition = max(cursor.partition_index, 0) if cursor is not None else 0
    # (name, entry or None): None for a topic to describe, an entry for one answered with an error.
    candidates: list[tuple[str, dict[str, Any] | None]] = []
    if not request.topics:
        candidates = [(t.name, None) for t in describable_topics(broker, ctx)]
    else:
        denied = acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
        for name in sorted({t.name for t in request.topics}):
            if name in denied:
                candidates.append((name, _error_entry(name, E.topic_authorization_failed)))
            elif broker.metadata.get_topic(name) is None:
                candidates.append((name, _error_entry(name, E.unknown_topic_or_partition)))
            else:
                candidates.append((name, None))
    candidates.sort(key=lambda c: c[0])
    if start_name is not None:
        candidates = [c for c in candidates if c[0] >= start_name]
    remaining = min(max(request.response_partition_limit, 1), MAX_PARTITIONS)
    topics: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for name, error_entry in candidates:
        if error_entry is not None:
            topics.append(error_entry)
            continue
        info = broker.metadata.get_topic(name)
        if info is None:  # deleted while this answer was put together
            topics.append(_error_entry(name, E.unknown_topic_or_partition))
            continue
        if remaining == 0:  # the page is full: the next one starts with this topic
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        entry = topic_entry(broker, info)
        first = start_partition if name == start_name else 0
        partitions = entry["partitions"][first:first + remaining]
        remaining -= len(partitions)
        for p in partitions:
            p["eligible_leader_replicas"] = []
            p["last_known_elr"] = []
        entry["partitions"] = partitions
        entry["topic_authorized_operations"] = acls.authorized_operations(ctx, ResourceType.TOPIC, name)
        topics.append(entry)
        if first + len(partitions) < info.partitions:  # this topic goes on in the next page
            next_cursor = {"topic_name": name, "partition_index": first + len(partitions)}
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}
