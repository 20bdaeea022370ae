"""CreateTopics (19): partitions, replication factor (1 on a single broker), configs, validate_only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.topics import TopicError, refuse_excessive_partitions
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

SOURCE_CODES = {
    "DYNAMIC_TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
    "GROUP_CONFIG": 8,
}


def config_entries(broker: Broker, overrides: dict[str, str]) -> list[dict[str, Any]]:
    from strom.config import describe_topic_config

    return [
        {"name": e.name, "value": e.value, "read_only": e.read_only,
         "config_source": SOURCE_CODES.get(e.source, 0), "is_sensitive": e.sensitive}
        for e in describe_topic_config(broker.config, overrides)
    ]


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    validate_only = getattr(request, "validate_only", False)
    seen: set[str] = set()
    results = []
    acls = broker.acls
    # CREATE on the cluster allows every topic; otherwise CREATE on each topic is needed.
    denied = set() if acls.cluster_allowed(ctx, AclOperation.CREATE, audit_denial=False) else acls.denied(
        ctx, AclOperation.CREATE, ResourceType.TOPIC, (t.name for t in request.topics))
    try:
        refuse_excessive_partitions(_partitions_asked(broker, request.topics, denied))
    except TopicError as e:  # the whole request, before anything is made or allocated (Kafka's way)
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "error_code": e.error_code, "error_message": e.message, "configs": None,
             "num_partitions": -1, "replication_factor": -1} for t in request.topics]}
    for t in request.topics:
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        partitions = t.num_partitions
        rf = t.replication_factor
        assignment = None
        if t.assignments:
            partitions = len(t.assignments)
            rf = len(t.assignments[0].broker_ids)
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None, "configs": None}
        try:
            if t.name in seen:
                raise TopicError(E.invalid_request, f"Create topics request had '{t.name}' more than once.")
            seen.add(t.name)
            if t.name in denied:
                raise TopicError(E.topic_authorization_failed, f"Not authorized to create topic '{t.name}'.")
            if validate_only:
                p = broker.config.num_partitions if partitions == -1 else partitions
                r = broker.config.default_replication_factor if rf == -1 else rf
                await broker.topics.validate_async(t.name, p, r, configs)
                entry.update(num_partitions=p, replication_factor=r, configs=config_entries(broker, configs))
            else:
                info = await broker.topics.create_async(t.name, partitions, rf, configs, assignment=assignment)
                entry.update(topic_id=info.topic_id, num_partitions=info.partitions,
                             replication_factor=broker.topics.replication_factor(info.name),
                             configs=config_entries(broker, info.configs))
        except TopicError as e:
            entry.update(error_code=e.error_code, error_message=e.message, num_partitions=-1, replication_factor=-1)
        results.append(entry)
    return {"throttle_time": 0, "topics": results}


def _partitions_asked(broker: Broker, topics: Any, denied: set[str]) -> int:
    """The partitions the request would create, counted as Kafka counts them: its assignments, or
    num_partitions (-1: num.partitions), for each topic that would be tried (named the first time,
    and one the principal may create)."""
    total = 0
    counted: set[str] = set()
    for t in topics:
        if t.name in counted or t.name in denied:
            continue
        counted.add(t.name)
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += broker.config.num_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total
