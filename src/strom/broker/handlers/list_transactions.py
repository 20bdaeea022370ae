"""ListTransactions (66): the transactional ids this broker coordinates, filtered by state names
(Kafka's: Ongoing, PrepareCommit, ...), producer ids, from v1 a minimum running time and from v2 a
regular expression the whole transactional id must match (KIP-1152; an invalid one answers
INVALID_REGULAR_EXPRESSION)."""

from __future__ import annotations

import re
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
MAX_VERSION = 2

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
    pattern: re.Pattern[str] | None = None
    if source := getattr(request, "transactional_id_pattern", None):  # null or empty: every id
        try:
            pattern = re.compile(source)
        except re.error:
            return {"throttle_time": 0, "error_code": E.invalid_regular_expression, "unknown_state_filters": [],
                    "transaction_states": []}
    now = now_ms()
    listed = []
    for txn_id, meta in sorted(coord.shard.txns.items()):
        if coord.error_for(txn_id) is not E.none:
            continue
        if not broker.acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, False):
            continue  # listed only to those who may describe it
        if pattern is not None and not pattern.fullmatch(txn_id):
            continue
        if (states and meta.state.display not in states) or (pids and meta.producer_id not in pids):
            continue
        if min_duration >= 0 and (meta.state is not TxnState.ONGOING or now - meta.start_ms < min_duration):
            continue
        listed.append({"transactional_id": txn_id, "producer_id": meta.producer_id,
                       "transaction_state": meta.state.display})
    return {"throttle_time": 0, "error_code": E.none, "unknown_state_filters": unknown,
            "transaction_states": listed}
