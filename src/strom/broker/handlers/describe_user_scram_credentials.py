"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has, and their iterations.
Needs DESCRIBE on the cluster, as in Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security import scram_admin
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.cluster_allowed(ctx, AclOperation.DESCRIBE):
        # Named users: the error on each (librdkafka 2.16 crashes on a top-level error, which is
        # then the only way to refuse a request for every user).
        return {"throttle_time": 0, "error_code": 0 if request.users else E.cluster_authorization_failed,
                "error_message": None if request.users else "Cluster authorization failed.",
                "results": [{"user": u.name, "error_code": E.cluster_authorization_failed,
                             "error_message": "Cluster authorization failed.", "credential_infos": []}
                            for u in request.users or ()]}
    users = None if request.users is None else [u.name for u in request.users]
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "results": scram_admin.describe(users, broker.credentials.all())}
