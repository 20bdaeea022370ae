"""AlterUserScramCredentials (51): add, replace or delete users' SCRAM credentials. The client sends
a salted password, never the password; the store is written in a thread, one change at a time.
Needs ALTER on the cluster, as in Kafka."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security import scram_admin
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

_one_at_a_time = asyncio.Lock()  # each change reads what the one before wrote


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.cluster_allowed(ctx, AclOperation.ALTER):
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        return {"throttle_time": 0, "results": [
            {"user": u, "error_code": E.cluster_authorization_failed, "error_message": "Cluster authorization failed."}
            for u in users]}
    async with _one_at_a_time:
        change = scram_admin.alter(list(request.deletions), list(request.upsertions), broker.credentials.all())
        if change.upserts or change.deletions:
            try:
                await asyncio.get_running_loop().run_in_executor(None, broker.credentials.alter, change.upserts,
                                                                 change.deletions)
            except Exception as e:  # the store could not be written (ZooKeeper away, disk)
                return {"throttle_time": 0, "results": [
                    {"user": r["user"], "error_code": r["error_code"] or E.unknown_server_error,
                     "error_message": r["error_message"] if r["error_code"] else f"credentials not stored: {e}"}
                    for r in change.results]}
    return {"throttle_time": 0, "results": change.results}
