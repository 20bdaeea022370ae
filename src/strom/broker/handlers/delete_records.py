"""DeleteRecords (21): move a partition's log start offset forward.

The request goes to each partition's leader, which moves its own log start at once and answers
when every replica on a live broker has followed (a follower learns the leader's log start from
its next fetch and reports its own in the one after), or REQUEST_TIMED_OUT after the
request's timeout, as Kafka's delayed DeleteRecords does. The internal topics are refused with
INVALID_TOPIC_EXCEPTION: their records are the coordinators' state.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from strom.coordinator.config import INTERNAL_TOPICS
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.replication.partition import Partition

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    replica_manager = broker.replica_manager
    waits: list[tuple[Partition, int, dict[str, Any]]] = []
    denied = broker.acls.denied(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            parts.append(entry)
            if t.name in denied:
                entry["error_code"] = E.topic_authorization_failed
                continue
            if t.name in INTERNAL_TOPICS:  # the coordinators' state: Kafka refuses this too
                entry["error_code"] = E.invalid_topic_exception
                continue
            part, entry["error_code"] = replica_manager.leader_partition(t.name, p.partition_index)
            if part is None:
                continue
            plog = part.log
            target = plog.high_watermark if p.offset == -1 else p.offset
            if target < 0 or target > plog.high_watermark:
                entry["error_code"] = E.offset_out_of_range
                continue
            if target > plog.log_start_offset:
                plog.delete_records(target)
                # Fetch sessions (followers' above all: they must learn it) tell the new log start.
                broker.purgatory.notify(part.key)
            entry["low_watermark"] = plog.log_start_offset
            waits.append((part, target, entry))
        topics.append({"name": t.name, "partitions": parts})
    if waits:
        timeout_s = max(request.timeout.total_seconds(), 0.0)
        results = await asyncio.gather(*(replica_manager.wait_for_low_watermark(part, target, timeout_s)
                                         for part, target, _ in waits))
        for (_, _, entry), (error, low) in zip(waits, results, strict=True):
            entry["error_code"], entry["low_watermark"] = error, low
    return {"throttle_time": 0, "topics": topics}
