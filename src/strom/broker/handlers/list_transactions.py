"""ListTransactions (66): the transactional ids this broker coordinates, filtered by state names
(Kafka's: Ongoing, PrepareCommit, ...), producer ids and, from v1, a minimum running time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.clock import now_ms
from strom.coordinator.txn_records import TxnState
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

_STATES = {s.display: s for s in TxnState}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = getattr(broker, "txn_coordinator", None)
    if coord is None or not coord.loaded:
        return {"throttle_time": 0, "error_code": E.coordinator_not_available, "unknown_state_filters": [],
                "transaction_states": []}
    states = set(request.state_filters)
    unknown = sorted(states - set(_STATES))
    pids = set(request.producer_id_filters)
    min_duration = getattr(request, "duration_filter", -1)
    now = now_ms()
    listed = []
    for txn_id, meta in sorted(coord.shard.txns.items()):
        if coord.error_for(txn_id) is not E.none:
            continue
        if not broker.acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, False):
            continue  # listed only to those who may describe it
        if (states and meta.state.display not in states) or (pids and meta.producer_id not in pids):
            continue
        if min_duration >= 0 and (meta.state is not TxnState.ONGOING or now - meta.start_ms < min_duration):
            continue
        listed.append({"transactional_id": txn_id, "producer_id": meta.producer_id,
                       "transaction_state": meta.state.display})
    return {"throttle_time": 0, "error_code": E.none, "unknown_state_filters": unknown,
            "transaction_states": listed}
