"""DescribeAcls (29): the ACL bindings a filter matches (needs DESCRIBE on the cluster)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import (
    AclBindingFilter,
    AclOperation,
    AclPermission,
    InvalidAcl,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 29
MIN_VERSION = 1  # kio has no v0 (Kafka 4 dropped it); every client asks v1+
MAX_VERSION = 3


def filter_of(f: Any) -> AclBindingFilter:
    """DescribeAcls' request and DeleteAcls' filters have the same fields."""
    try:
        flt = AclBindingFilter(ResourceType(int(f.resource_type_filter)), f.resource_name_filter,
                               PatternType(int(getattr(f, "pattern_type_filter", PatternType.LITERAL))),
                               f.principal_filter, f.host_filter, AclOperation(int(f.operation)),
                               AclPermission(int(f.permission_type)))
    except ValueError as e:
        raise InvalidAcl(str(e)) from None
    flt.validate()
    return flt


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    if not acls.enabled:
        return {"throttle_time": 0, "error_code": E.security_disabled,
                "error_message": "no authorizer is configured (authorizer.class.name)", "resources": []}
    if not acls.cluster_allowed(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": E.cluster_authorization_failed, "resources": []}
    try:
        found = acls.describe(filter_of(request))
    except InvalidAcl as e:
        return {"throttle_time": 0, "error_code": E.invalid_request, "error_message": str(e), "resources": []}
    resources = []
    for (rtype, name, pattern), group in itertools.groupby(
            found, key=lambda b: (b.resource_type, b.resource_name, b.pattern_type)):
        resources.append({"resource_type": int(rtype), "resource_name": name, "pattern_type": int(pattern),
                          "acls": [{"principal": b.principal, "host": b.host, "operation": int(b.operation),
                                    "permission_type": int(b.permission)} for b in group]})
    return {"throttle_time": 0, "error_code": E.none, "error_message": None, "resources": resources}
