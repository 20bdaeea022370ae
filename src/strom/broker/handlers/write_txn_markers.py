"""WriteTxnMarkers (27): a transaction coordinator on another broker asks this partition leader to
append COMMIT/ABORT markers. Answered per partition once the ISR has them.

v2 adds the marker's transaction version, 2 for a transaction of transactions V2 (KIP-890 part 2,
whose markers carry the epoch bumped at its end). strom's coordinators run transactions V1 only (no
``transaction.version`` is finalized) and send v1, so v1 stays the last version served."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    markers = []
    allowed = broker.acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)  # brokers only
    for m in request.markers:
        partitions = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        if not allowed:
            markers.append({"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": E.cluster_authorization_failed}
                                                for p in t.partition_indexes]} for t in m.topics]})
            continue
        results = await broker.txn_markers.append_markers(m.producer_id, m.producer_epoch, m.transaction_result,
                                                          m.coordinator_epoch, partitions)
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), error in results.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
        markers.append({"producer_id": m.producer_id,
                        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
    return {"markers": markers}
