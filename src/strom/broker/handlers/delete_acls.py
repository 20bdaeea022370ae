"""DeleteAcls (31): remove the ACL bindings each filter matches (needs ALTER on the cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.describe_acls import filter_of
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclBindingFilter, AclOperation, InvalidAcl

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 31
MIN_VERSION = 1  # kio has no v0 (Kafka 4 dropped it); every client asks v1+
MAX_VERSION = 3


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls

    def all_failed(code: E, message: str | None) -> dict[str, Any]:
        return {"throttle_time": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in request.filters]}

    if not acls.enabled:
        return all_failed(E.security_disabled, "no authorizer is configured (authorizer.class.name)")
    if not acls.cluster_allowed(ctx, AclOperation.ALTER):
        return all_failed(E.cluster_authorization_failed, None)
    filters: list[AclBindingFilter | None] = []
    errors: list[str | None] = []
    for f in request.filters:
        try:
            filters.append(filter_of(f))
            errors.append(None)
        except InvalidAcl as e:
            filters.append(None)
            errors.append(str(e))
    try:
        matched = await acls.delete([f for f in filters if f is not None])
    except Exception as e:  # the store could not be written
        return all_failed(E.unknown_server_error, f"ACLs not removed: {e}")
    found = iter(matched)
    out: list[dict[str, Any]] = []
    for f, error in zip(filters, errors, strict=True):
        if f is None:
            out.append({"error_code": E.invalid_request, "error_message": error, "matching_acls": []})
            continue
        out.append({"error_code": E.none, "error_message": None, "matching_acls": [
            {"error_code": E.none, "error_message": None, "resource_type": int(b.resource_type),
             "resource_name": b.resource_name, "pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}
            for b in next(found)]})
    return {"throttle_time": 0, "filter_results": out}
