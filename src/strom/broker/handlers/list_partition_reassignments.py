"""ListPartitionReassignments (46): the replica moves under way, with the replicas being added and
removed. A controller API, answered from ZooKeeper's topic assignments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    cluster = broker.cluster
    if not broker.acls.cluster_allowed(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": E.cluster_authorization_failed, "error_message": None, "topics": []}
    if cluster is None:
        return {"throttle_time": 0, "error_code": E.none, "error_message": None, "topics": []}
    if cluster.controller is None or not cluster.controller.active:
        return {"throttle_time": 0, "error_code": E.not_controller, "error_message": None, "topics": []}
    wanted = None if request.topics is None else {t.name: set(t.partition_indexes) for t in request.topics}
    topics = []
    for name, a in sorted(cluster.store.assignments.items()):
        if wanted is not None and name not in wanted:
            continue
        moving = sorted(set(a.adding) | set(a.removing))
        parts = [{"partition_index": p, "replicas": a.replicas[p], "adding_replicas": a.adding.get(p, []),
                  "removing_replicas": a.removing.get(p, [])}
                 for p in moving if wanted is None or p in wanted[name]]
        if parts:
            topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "error_code": E.none, "error_message": None, "topics": topics}
