"""Metadata (3): brokers, topics, partitions, leaders; auto-creates topics when allowed.

v13 adds a top-level error code (KIP-1102: REBOOTSTRAP_REQUIRED, for a client whose bootstrap
servers no longer lead it to the cluster); a broker that answers has nothing to report there: 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.topics import TopicError
from strom.cluster.metadata import TopicInfo
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

NOT_REQUESTED = -2147483648  # the schema's default for the authorized operations fields


def cluster_authorized_operations(broker: Broker, ctx: RequestContext, requested: bool) -> int:
    """The bit field of Kafka's AclOperation codes the principal may use on the cluster (every one
    without an authorizer, as Kafka reports it)."""
    return broker.acls.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) if requested else NOT_REQUESTED


def topic_entry(broker: Broker, topic: TopicInfo) -> dict[str, Any]:
    if broker.cluster is not None:
        return _cluster_topic_entry(broker, topic)
    node = broker.node.broker_id
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in range(topic.partitions)
        ],
        "topic_authorized_operations": -2147483648,
    }


def _cluster_topic_entry(broker: Broker, topic: TopicInfo) -> dict[str, Any]:
    """Leaders, replicas and ISR as ZooKeeper has them; a partition without a live leader (or led
    here and not taken up yet) answers LEADER_NOT_AVAILABLE, its dead replicas listed as offline."""
    assert broker.cluster is not None
    store = broker.cluster.store
    assignment = store.assignments.get(topic.name)
    live = store.brokers
    me = broker.config.broker_id
    taking_up = broker.replica_manager.taking_up
    partitions = []
    for p in range(topic.partitions):
        replicas = assignment.replicas.get(p, []) if assignment is not None else []
        state = store.state(topic.name, p)
        leader = state.leader if state is not None and state.leader in live else -1
        if leader == me and taking_up(topic.name, p):
            leader = -1  # named leader, its log still being made: not serving it yet
        partitions.append({
            "error_code": 0 if leader >= 0 else E.leader_not_available,
            "partition_index": p,
            "leader_id": leader,
            "leader_epoch": state.leader_epoch if state is not None else -1,
            "replica_nodes": replicas,
            "isr_nodes": list(state.isr) if state is not None else [],
            "offline_replicas": [b for b in replicas if b not in live],
        })
    return {"error_code": 0, "name": topic.name, "topic_id": topic.topic_id, "is_internal": topic.internal,
            "partitions": partitions, "topic_authorized_operations": -2147483648}


def describable_topics(broker: Broker, ctx: RequestContext) -> list[TopicInfo]:
    """Every topic the principal may describe (DESCRIBE on the topic): an answer about all topics
    leaves the others out, as if they did not exist (shared with DescribeTopicPartitions)."""
    visible = list(broker.metadata.topics().values())
    acls = broker.acls
    if acls.enabled:
        hidden = acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in visible), False)
        visible = [t for t in visible if t.name not in hidden]
    return visible


# How long Metadata keeps naming a broker whose registration vanished. librdkafka drops a broker
# that a Metadata answer leaves out before it applies that answer's new leaders, and a partition
# it was leading then sits on no broker until its next 1 s metadata scan; an answer that names the
# new leader while still listing the dead broker moves the partition at once (measured in
# docs/performance.md, "Unavailability when a leader dies"). Leaders are never a departed broker.
DEPARTED_BROKER_GRACE_S = 3.0


def brokers_and_controller(broker: Broker, listener: str = "",
                           with_departed: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The live brokers as clients on ``listener`` should reach them (Kafka answers with the
    endpoints of the listener the request came in on), and the controller's id; with
    ``with_departed`` (Metadata) also the brokers that left in the last DEPARTED_BROKER_GRACE_S."""
    if broker.cluster is None:
        node = broker.node_for(listener)
        return [{"node_id": node.broker_id, "host": node.host, "port": node.port, "rack": node.rack}], node.broker_id
    store = broker.cluster.store
    out = []
    regs = list(store.brokers.values())
    if with_departed:
        regs += store.recently_departed(DEPARTED_BROKER_GRACE_S)
    for reg in sorted(regs, key=lambda r: r.broker_id):
        host, port = reg.address_for(listener)
        out.append({"node_id": reg.broker_id, "host": host, "port": port, "rack": reg.rack})
    return out, store.controller_id


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    md = broker.metadata
    # v0: an empty array means all topics; v1+: null means all topics.
    requested = request.topics
    all_topics = requested is None or (ctx.api_version == 0 and len(requested) == 0)
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    acls = broker.acls
    topics: list[dict[str, Any]] = []
    if all_topics:
        topics = [topic_entry(broker, t) for t in describable_topics(broker, ctx)]
    else:
        for rt in requested:
            name = rt.name
            topic: TopicInfo | None = None
            if name is None and getattr(rt, "topic_id", None) is not None:
                topic = md.topic_by_id(rt.topic_id)
                if topic is None or not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    # A topic the principal may not see is as unknown as a missing one.
                    topics.append({"error_code": E.unknown_topic_id, "name": None, "topic_id": rt.topic_id,
                                   "partitions": []})
                    continue
            elif name is not None and not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append({"error_code": E.topic_authorization_failed, "name": name, "partitions": []})
                continue
            elif name is not None:
                topic = md.get_topic(name)
                if topic is None and broker.topics.being_created(name):
                    # Kafka's answer while a topic's partitions are not ready yet: clients retry.
                    topics.append({"error_code": E.leader_not_available, "name": name, "partitions": []})
                    continue
                if topic is None and allow_auto and broker.config.auto_create_topics_enable:
                    if not (acls.cluster_allowed(ctx, AclOperation.CREATE)
                            or acls.allowed(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)):
                        topics.append({"error_code": E.topic_authorization_failed, "name": name, "partitions": []})
                        continue
                    try:
                        if broker.cluster is not None:
                            broker.topics.start_auto_create(name)
                            topics.append({"error_code": E.leader_not_available, "name": name, "partitions": []})
                            continue
                        topic = broker.topics.create(name)
                    except TopicError as e:
                        topics.append({"error_code": e.error_code, "name": name, "partitions": []})
                        continue
            if topic is None:
                topics.append({"error_code": E.unknown_topic_or_partition, "name": name, "partitions": []})
            else:
                topics.append(topic_entry(broker, topic))
    if getattr(request, "include_topic_authorized_operations", False):
        for entry in topics:
            if entry["error_code"] == 0:
                entry["topic_authorized_operations"] = acls.authorized_operations(ctx, ResourceType.TOPIC,
                                                                                  entry["name"])
    brokers, controller = brokers_and_controller(broker, ctx.listener, with_departed=True)
    return {
        "throttle_time": 0,
        "error_code": E.none,
        "brokers": brokers,
        "cluster_id": md.cluster_id,
        "controller_id": controller,
        "topics": topics,
        # Asked for by Metadata v8-v10 (librdkafka's describe_cluster comes this way).
        "cluster_authorized_operations": cluster_authorized_operations(
            broker, ctx, bool(getattr(request, "include_cluster_authorized_operations", False))),
    }
