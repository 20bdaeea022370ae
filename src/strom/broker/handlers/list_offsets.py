"""ListOffsets (2): earliest, latest, max timestamp, or the first offset at/after a timestamp.

The tiered-storage lookups answer as Kafka does for a topic without remote storage (strom has
none): earliest-local (-4, v8+) is the log start, latest-tiered (-5, v9+) and earliest-pending-upload
(-6, v11+, KIP-1023) find no offset (-1). v10's timeout bounds a lookup in remote storage; every
lookup here is local and answered at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 11

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6


READ_COMMITTED = 1


def lookup(plog: Any, timestamp: int, isolation_level: int = 0) -> tuple[int, int]:
    """(timestamp, offset) for one partition; (-1, -1) when no record is at/after the timestamp.
    Latest is the high watermark, or with READ_COMMITTED the last stable offset."""
    if timestamp == LATEST:
        return -1, plog.last_stable_offset if isolation_level == READ_COMMITTED else plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_and_offset() if hasattr(plog, "max_timestamp_and_offset") else None
        return found if found is not None else (-1, -1)
    found_ts = plog.offset_for_timestamp(timestamp)
    if found_ts is None:
        return -1, -1
    offset, ts = found_ts
    return ts, offset


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    denied = broker.acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if t.name in denied:
                parts.append({"partition_index": p.partition_index, "error_code": E.topic_authorization_failed,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            plog, error, epoch = broker.leader_log(t.name, p.partition_index,
                                                   getattr(p, "current_leader_epoch", -1))
            if plog is None:
                parts.append({"partition_index": p.partition_index, "error_code": error,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            ts, offset = lookup(plog, p.timestamp, getattr(request, "isolation_level", 0))
            # No offset found (a timestamp past the last record, nothing tiered): no epoch either.
            parts.append({"partition_index": p.partition_index, "error_code": 0, "timestamp": ts,
                          "offset": offset, "leader_epoch": epoch if offset >= 0 else -1})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
