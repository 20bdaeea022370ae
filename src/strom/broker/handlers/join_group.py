"""JoinGroup (11): join or rejoin a classic group; the answer waits for the rebalance to complete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.api import JoinGroupRequestData, JoinGroupResult, duration_ms
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, JoinGroupResult(E.group_authorization_failed, request.member_id))
    coord, error = coordinator_for(broker, request.group_id)
    if coord is None:
        return _response(ctx, JoinGroupResult(error, request.member_id))
    session_ms = duration_ms(request.session_timeout)
    # v0 has one timeout: the rebalance waits as long as the session lasts.
    rebalance = getattr(request, "rebalance_timeout", None)
    req = JoinGroupRequestData(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else duration_ms(rebalance),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.api_version >= 4,  # KIP-394
        reason=getattr(request, "reason", None),
    )
    return _response(ctx, await coord.join_group(req))


def _response(ctx: RequestContext, r: JoinGroupResult) -> dict[str, Any]:
    flexible_names = ctx.api_version >= 7  # protocol_name is nullable from v7
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name if flexible_names else (r.protocol_name or ""),
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in r.members],
    }
