"""AddPartitionsToTxn (24): partitions join the producer's ongoing transaction.

v0-3 carry one transaction (from the producer); v4+ a batch of them (from brokers), each possibly
verify_only (is the partition in the transaction already?). Unknown partitions fail the whole
transaction's request: they get UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.coordinator.txn_runtime import fenced_error, txn_coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5
BATCHED_VERSION = 4
PRODUCER_FENCED_VERSION = 2


async def _one(broker: Broker, ctx: RequestContext, transactional_id: str, producer_id: int, epoch: int,
               topics: Any, verify_only: bool = False) -> list[dict[str, Any]]:
    version = ctx.api_version
    partitions = [(t.name, int(p)) for t in topics for p in t.partitions]
    errors: dict[tuple[str, int], E] = {}
    coord, error = txn_coordinator_for(broker, transactional_id)
    acls = broker.acls
    denied = acls.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, (t for t, _ in partitions))
    if not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        errors = dict.fromkeys(partitions, E.transactional_id_authorization_failed)
    elif denied:  # Kafka: the refused topics say why, the others were not attempted
        errors = {tp: E.topic_authorization_failed if tp[0] in denied else E.operation_not_attempted
                  for tp in partitions}
    elif coord is None:
        errors = dict.fromkeys(partitions, error)
    else:
        unknown = {tp for tp in partitions
                   if (info := broker.metadata.get_topic(tp[0])) is None or not 0 <= tp[1] < info.partitions}
        if unknown:
            errors = {tp: E.unknown_topic_or_partition if tp in unknown else E.operation_not_attempted
                      for tp in partitions}
        elif verify_only:
            errors = coord.verify_partitions(transactional_id, producer_id, epoch, partitions)
        else:
            error = await coord.add_partitions(transactional_id, producer_id, epoch, partitions)
            errors = dict.fromkeys(partitions, fenced_error(error, version, PRODUCER_FENCED_VERSION))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), err in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": err})
    return [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    version = ctx.api_version
    if version < BATCHED_VERSION:
        results = await _one(broker, ctx, request.v3_and_below_transactional_id,
                             request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                             request.v3_and_below_topics)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": results}
    out = []
    for txn in request.transactions:
        results = await _one(broker, ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                             txn.verify_only)
        out.append({"transactional_id": txn.transactional_id, "topic_results": results})
    return {"throttle_time": 0, "error_code": E.none, "results_by_transaction": out}
