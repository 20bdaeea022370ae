"""DeleteRecords (21): move a partition's log start offset forward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

TOPIC_AUTHORIZATION_FAILED = 29

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    denied = broker.acls.denied(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            plog = broker.log_manager.get_log(t.name, p.partition_index)
            entry = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            if t.name in denied:
                entry["error_code"] = TOPIC_AUTHORIZATION_FAILED
            elif plog is None:
                entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
            else:
                target = plog.high_watermark if p.offset == -1 else p.offset
                if target < 0 or target > plog.high_watermark:
                    entry["error_code"] = OFFSET_OUT_OF_RANGE
                else:
                    if target > plog.log_start_offset:
                        plog.delete_records(target)
                    entry["low_watermark"] = plog.log_start_offset
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
