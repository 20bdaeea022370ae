"""DescribeConfigs (32): broker and topic configs with their sources (and synonyms, types and docs
when asked). A BROKER resource named "" lists the cluster-wide dynamic defaults only, as in Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.create_topics import SOURCE_CODES
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
GROUP = 32


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    from strom.config import describe_topic_config

    results = []
    for r in request.resources:
        result: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                                  "resource_name": r.resource_name, "configs": []}
        entries = None
        refused = broker.acls.config_resource_error(ctx, AclOperation.DESCRIBE_CONFIGS, int(r.resource_type),
                                                    r.resource_name)
        if refused:
            result.update(error_code=refused)
        elif r.resource_type == TOPIC:
            info = broker.metadata.get_topic(r.resource_name)
            if info is None:
                result.update(error_code=E.unknown_topic_or_partition, error_message="unknown topic")
            else:
                entries = describe_topic_config(broker.config, info.configs)
        elif r.resource_type == BROKER:
            if r.resource_name == "":
                entries = [e for e in broker.config.describe() if e.name in broker.config.dynamic_default]
            elif r.resource_name != str(broker.config.broker_id):
                result.update(error_code=E.invalid_request, error_message=f"unknown broker {r.resource_name}")
            else:
                entries = broker.config.describe()
        elif r.resource_type == GROUP:
            from strom.config.group import describe_group_config

            entries = describe_group_config(broker.config, broker.metadata.group_configs(r.resource_name))
        else:
            result.update(error_code=E.invalid_request, error_message=f"unsupported resource type {r.resource_type}")
        if entries is not None:
            keys = set(r.configuration_keys) if r.configuration_keys is not None else None
            synonyms = bool(getattr(request, "include_synonyms", False))
            docs = bool(getattr(request, "include_documentation", False))
            result["configs"] = [
                {"name": e.name, "value": e.value, "read_only": e.read_only,
                 "config_source": SOURCE_CODES.get(e.source, 0), "is_default": e.source == "DEFAULT_CONFIG",
                 "is_sensitive": e.sensitive,
                 "synonyms": [{"name": s.name, "value": s.value, "source": SOURCE_CODES.get(s.source, 0)}
                              for s in e.synonyms] if synonyms else [],
                 "config_type": int(e.type), "documentation": e.doc if docs else None}
                for e in entries
                if keys is None or e.name in keys
            ]
        results.append(result)
    return {"throttle_time": 0, "results": results}
