"""OffsetForLeaderEpoch (23): where a leader epoch ends in this leader's log (KIP-101, KIP-279).

Followers ask it after a leader change to find where their log diverges from the leader's, and
consumers (KIP-320) to check their position after one. The answer is the largest epoch at or below
the one asked for and the offset where it ends: the start of the next epoch, or the log end for
the latest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4


def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    acls = broker.acls
    if int(getattr(request, "replica_id", -1)) >= 0:  # a follower: a broker's right
        denied = set() if acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION) else {t.topic for t in request.topics}
    else:
        denied = acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if t.topic in denied:
                parts.append({"error_code": E.topic_authorization_failed, "partition": p.partition, "leader_epoch": -1,
                              "end_offset": -1})
                continue
            plog, error, _ = broker.leader_log(t.topic, p.partition, getattr(p, "current_leader_epoch", -1))
            if plog is None:
                parts.append({"error_code": error, "partition": p.partition, "leader_epoch": -1, "end_offset": -1})
                continue
            # The leader entered its epoch in the cache when it took over (on one broker too).
            epoch, end = plog.leader_epoch_cache.end_offset_for(p.leader_epoch, plog.log_end_offset)
            parts.append({"error_code": 0, "partition": p.partition, "leader_epoch": epoch, "end_offset": end})
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
