"""DescribeClientQuotas (48): the quotas of the entities a filter matches (needs DescribeConfigs on
the cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation
from strom.security.quotas import CLIENT_ID, DEFAULT, IP, USER, QuotaEntity

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

EXACT, DEFAULT_MATCH, ANY = 0, 1, 2


def _matches(entity: QuotaEntity, components: Any, strict: bool) -> bool:
    parts = {USER: entity.user, CLIENT_ID: entity.client_id}
    named = {kind for kind, value in parts.items() if value is not None}
    asked = set()
    for c in components:
        kind, how = c.entity_type, int(c.match_type)
        asked.add(kind)
        value = parts.get(kind)
        if value is None:
            return False
        if how == EXACT and value != (DEFAULT if c.match is None else c.match):
            return False
        if how == DEFAULT_MATCH and value != DEFAULT:
            return False
    return not strict or named == asked


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.cluster_allowed(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time": 0, "error_code": E.cluster_authorization_failed, "error_message": None,
                "entries": None}
    for c in request.components:
        if c.entity_type not in (USER, CLIENT_ID, IP) or int(c.match_type) not in (EXACT, DEFAULT_MATCH, ANY):
            return {"throttle_time": 0, "error_code": E.invalid_request, "entries": None,
                    "error_message": f"bad filter component {c.entity_type!r} / match type {int(c.match_type)}"}
    entries = [
        {"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity.describe()],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in sorted(broker.quotas.quotas.items(),
                                     key=lambda kv: (kv[0].user or "", kv[0].client_id or ""))
        if _matches(entity, request.components, bool(request.strict))]
    return {"throttle_time": 0, "error_code": E.none, "error_message": None, "entries": entries}
