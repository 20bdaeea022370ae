"""ElectLeaders (43): move leaderships back to the preferred replicas, or elect a leader for a
partition whose in-sync replicas are all gone (unclean). A controller API: clients send it to the
controller; another broker answers NOT_CONTROLLER. On a single broker every partition is led by
its preferred (only) replica already."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED, UNCLEAN = 0, 1


def _requested(broker: Broker, request: Any) -> list[tuple[str, int]]:
    if request.topic_partitions is None:  # null: every partition
        return [(t.name, p) for t in broker.metadata.topics().values() for p in range(t.partitions)]
    return [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    wanted = _requested(broker, request)
    election = getattr(request, "election_type", PREFERRED)
    results: dict[tuple[str, int], tuple[E, str | None]]
    top_error = E.none
    cluster = broker.cluster
    if not broker.acls.cluster_allowed(ctx, AclOperation.ALTER):
        results = {tp: (E.cluster_authorization_failed, None) for tp in wanted}
        top_error = E.cluster_authorization_failed
    elif cluster is None:
        results = {}
        for topic, p in wanted:
            info = broker.metadata.get_topic(topic)
            known = info is not None and 0 <= p < info.partitions
            results[(topic, p)] = (E.election_not_needed, None) if known else (E.unknown_topic_or_partition, None)
    elif cluster.controller is None or not cluster.controller.active:
        results = {tp: (E.not_controller, None) for tp in wanted}
        top_error = E.not_controller
    else:
        results = await cluster.controller.elect_leaders(wanted, unclean=election == UNCLEAN)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (error, message) in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": p, "error_code": error, "error_message": message})
    response: dict[str, Any] = {"throttle_time": 0, "replica_election_results": [
        {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}
    if ctx.api_version >= 1:
        response["error_code"] = top_error
    return response
