"""DescribeCluster (60): the live brokers, the cluster id and the controller, as a broker answers it.

The same brokers and controller as Metadata gives (metadata.brokers_and_controller), without the
topics: Java's and kafka-python's AdminClient.describe_cluster() ask this (librdkafka's asks Metadata
instead). A broker
is a "broker" endpoint (KIP-919's endpoint type 1); asking it for controllers (2) is Kafka's
MISMATCHED_ENDPOINT_TYPE. With ZooKeeper there is no fencing, so no broker is ever fenced (v2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.metadata import brokers_and_controller, cluster_authorized_operations
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKER_ENDPOINTS = 1
CONTROLLER_ENDPOINTS = 2


def _refused(ctx: RequestContext, endpoint_type: int) -> dict[str, Any] | None:
    if endpoint_type == BROKER_ENDPOINTS:
        return None
    if endpoint_type == CONTROLLER_ENDPOINTS:
        code = E.mismatched_endpoint_type
        message = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
    else:
        code = E.unsupported_endpoint_type
        message = f"Unsupported endpoint type {endpoint_type}"
    # v0 has no endpoint type in its response, so Kafka answers INVALID_REQUEST there.
    return {"throttle_time": 0, "error_code": E.invalid_request if ctx.api_version == 0 else code,
            "error_message": message, "endpoint_type": endpoint_type, "cluster_id": "", "brokers": []}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    endpoint_type = int(getattr(request, "endpoint_type", BROKER_ENDPOINTS))
    refused = _refused(ctx, endpoint_type)
    if refused is not None:
        return refused
    brokers, controller = brokers_and_controller(broker)
    return {
        "throttle_time": 0,
        "error_code": E.none,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINTS,
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": controller,
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"],
                     "is_fenced": False} for b in brokers],
        "cluster_authorized_operations": cluster_authorized_operations(
            broker, ctx, request.include_cluster_authorized_operations),
    }
