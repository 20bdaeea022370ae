"""DescribeTransactions (65): the state, producer, timeout, start time and partitions of each
transactional id this broker coordinates (others get NOT_COORDINATOR; unknown ids
TRANSACTIONAL_ID_NOT_FOUND). A transaction not started has start time 0 where Kafka sends -1: kio,
and so ``strom transactions``, cannot read a negative timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.txn_runtime import txn_coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def _describe(broker: Broker, transactional_id: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"error_code": E.none, "transactional_id": transactional_id, "transaction_state": "",
                             "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": -1,
                             "producer_epoch": -1, "topics": []}
    coord, error = txn_coordinator_for(broker, transactional_id)
    value = coord.describe(transactional_id) if coord is not None else None
    if coord is not None and value is None:
        error = E.transactional_id_not_found
    if value is None:
        return {**entry, "error_code": error}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in value.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return {**entry, "transaction_state": value.state.display, "transaction_timeout": value.timeout_ms,
            "transaction_start_time": max(value.start_ms, 0), "producer_id": value.producer_id,
            "producer_epoch": value.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    return {"throttle_time": 0, "transaction_states": [
        _describe(broker, t) if acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t) else
        {"error_code": E.transactional_id_authorization_failed, "transactional_id": t, "transaction_state": "",
         "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": -1, "producer_epoch": -1, "topics": []}
        for t in request.transactional_ids]}
