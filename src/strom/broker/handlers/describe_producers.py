"""DescribeProducers (61): the active producers of partitions this broker leads: id, epoch, last
sequence and timestamp, and where each one's open transaction starts (-1: none). Finds hanging
transactions (an open transaction no coordinator knows about)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


def _partition(broker: Broker, topic: str, partition: int) -> dict[str, Any]:
    plog, error, _epoch = broker.leader_log(topic, partition)
    if plog is None:
        return {"partition_index": partition, "error_code": error, "error_message": None, "active_producers": []}
    producers = [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                  "last_timestamp": e.last_timestamp, "coordinator_epoch": -1,
                  "current_txn_start_offset": e.current_txn_first_offset}
                 for e in plog.producer_state.producers.values()]
    return {"partition_index": partition, "error_code": E.none, "error_message": None, "active_producers": producers}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    denied = broker.acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            _partition(broker, t.name, p) if t.name not in denied else
            {"partition_index": p, "error_code": E.topic_authorization_failed, "error_message": None,
             "active_producers": []}
            for p in t.partition_indexes]}
        for t in request.topics]}
