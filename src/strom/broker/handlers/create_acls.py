"""CreateAcls (30): add ACL bindings (needs ALTER on the cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclBinding, AclOperation, AclPermission, InvalidAcl, PatternType, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 30
MIN_VERSION = 1  # kio has no v0 (Kafka 4 dropped it); every client asks v1+
MAX_VERSION = 3


def binding_of(c: Any) -> AclBinding:
    """The binding a creation asks for; InvalidAcl when Kafka would refuse it."""
    try:
        pattern = PatternType(int(getattr(c, "resource_pattern_type", PatternType.LITERAL)))
        b = AclBinding(ResourceType(int(c.resource_type)), c.resource_name, pattern, c.principal, c.host,
                       AclOperation(int(c.operation)), AclPermission(int(c.permission_type)))
    except ValueError as e:  # a code outside Kafka's enums
        raise InvalidAcl(str(e)) from None
    b.validate()
    return b


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls

    def results(code: E, message: str | None) -> dict[str, Any]:
        return {"throttle_time": 0,
                "results": [{"error_code": code, "error_message": message} for _ in request.creations]}

    if not acls.enabled:
        return results(E.security_disabled, "no authorizer is configured (authorizer.class.name)")
    if not acls.cluster_allowed(ctx, AclOperation.ALTER):
        return results(E.cluster_authorization_failed, None)
    out: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        try:
            valid.append(binding_of(c))
            out.append({"error_code": E.none, "error_message": None})
        except InvalidAcl as e:
            out.append({"error_code": E.invalid_request, "error_message": str(e)})
    if valid:
        try:
            await acls.create(valid)
        except InvalidAcl as e:
            return results(E.invalid_request, str(e))
        except Exception as e:  # the store could not be written (ZooKeeper away, disk)
            return results(E.unknown_server_error, f"ACLs not stored: {e}")
    return {"throttle_time": 0, "results": out}
