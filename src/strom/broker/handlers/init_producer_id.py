"""InitProducerId (22): producer ids for idempotent producers, and for transactional ones from the
transaction coordinator (epoch bump, fencing of an older instance, abort of its open transaction).

v6 (KIP-939) lets a producer take part in a two-phase commit: enable2Pc (no transaction timeout)
and keepPreparedTxn (keep the prepared transaction instead of aborting it), with the ongoing
transaction's producer id and epoch in the answer. Two-phase commit is off on strom, as it is on
Kafka by default (transaction.two.phase.commit.enable=false), so such a request is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Kafka's answer then; any other v6 request is served as v5
and answers no ongoing transaction (-1, -1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.cluster.metadata import ZooKeeperUnavailable
from strom.coordinator.txn_runtime import fenced_error, txn_coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 6
PRODUCER_FENCED_VERSION = 4



def _answer(error: E, producer_id: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "producer_id": producer_id, "producer_epoch": epoch}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    acls = broker.acls
    if request.transactional_id is not None:
        if not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _answer(E.transactional_id_authorization_failed)
    elif acls.enabled and not (acls.cluster_allowed(ctx, AclOperation.IDEMPOTENT_WRITE, audit_denial=False)
                               or acls.any_allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
        acls.cluster_allowed(ctx, AclOperation.IDEMPOTENT_WRITE)  # the audit line
        return _answer(E.cluster_authorization_failed)
    if getattr(request, "enable2_pc", False) or getattr(request, "keep_prepared_txn", False):
        return _answer(E.transactional_id_authorization_failed)  # two-phase commit is not enabled
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if request.transactional_id is not None:
        coord, error = txn_coordinator_for(broker, request.transactional_id)
        if coord is None:
            return _answer(error)
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        outcome = await coord.init_producer_id(request.transactional_id, timeout_ms, pid, epoch)
        if outcome.error is not E.none:
            return _answer(fenced_error(outcome.error, ctx.api_version, PRODUCER_FENCED_VERSION))
        return _answer(E.none, outcome.producer_id, outcome.producer_epoch)
    if pid >= 0 and epoch >= 0 and epoch < 32767:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        return _answer(E.none, pid, epoch + 1)
    try:
        return _answer(E.none, broker.metadata.allocate_producer_id(), 0)
    except ZooKeeperUnavailable:  # no new block of ids without ZooKeeper: the producer asks again
        return _answer(E.coordinator_not_available)
