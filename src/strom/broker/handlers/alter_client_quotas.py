"""AlterClientQuotas (49): set and remove quotas of users and client ids (needs AlterConfigs on the
cluster). Each entry is checked on its own; the valid ones are stored together."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation
from strom.security.quota_store import Change
from strom.security.quotas import InvalidQuota, QuotaEntity, validate_value

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


def _change(entry: Any) -> Change:
    entity = QuotaEntity.parse([(e.entity_type, e.entity_name) for e in entry.entity])
    change: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in change:
            raise InvalidQuota(f"quota '{op.key}' given twice")
        if op.remove:
            change[op.key] = None
        else:
            validate_value(op.key, float(op.value))
            change[op.key] = float(op.value)
    return entity, change


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    def answer(entry: Any, code: E, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message,
                "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}

    if not broker.acls.cluster_allowed(ctx, AclOperation.ALTER_CONFIGS):
        return {"throttle_time": 0,
                "entries": [answer(e, E.cluster_authorization_failed, None) for e in request.entries]}
    results: list[dict[str, Any]] = []
    changes: list[Change] = []
    for entry in request.entries:
        try:
            changes.append(_change(entry))
            results.append(answer(entry, E.none, None))
        except InvalidQuota as e:
            results.append(answer(entry, E.invalid_request, str(e)))
    if changes and not request.validate_only:
        try:
            await broker.quotas.alter(changes)
        except Exception as e:  # the store could not be written
            return {"throttle_time": 0, "entries": [answer(x, E.unknown_server_error, f"quotas not stored: {e}")
                                                    for x in request.entries]}
    return {"throttle_time": 0, "entries": results}
