"""Produce (0): check who may write where, then make one call down to the replica manager.

Authorization (WRITE on each topic, and on the transactional id for a transactional producer),
the acks value and the internal topics (__consumer_offsets, __transaction_state take no client
writes: INVALID_TOPIC_EXCEPTION, as in Kafka) are checked here; everything else about the write
(the batches' checks, min.insync.replicas, the append, the fsync of log.flush.interval.messages,
the wait for the ISR with acks=all) is ReplicaManager.append_records's.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from strom.coordinator.config import INTERNAL_TOPICS
from strom.protocol.errors import ErrorCode as E
from strom.replication.leader_append import partition_result
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 11

def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any] | None | Awaitable[dict[str, Any] | None]:
    """Appends on the spot; returns an awaitable only when the ack must wait (an fsync, or with
    acks=all the ISR)."""
    acks = request.acks
    refused = _refused(broker, ctx, request) if broker.acls.enabled else {}
    responses = []
    entries: list[tuple[str, int, Any]] = []  # what the replica manager appends
    slots: list[tuple[list[dict[str, Any] | None], int]] = []  # where each of its results goes
    for topic in request.topic_data:
        parts: list[dict[str, Any] | None] = []
        internal = topic.name in INTERNAL_TOPICS
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                parts.append(partition_result(pd.index, E.invalid_required_acks))
            elif refused and (refusal := refused.get(topic.name)):
                parts.append(partition_result(pd.index, refusal))
            elif internal:  # written by the coordinators only, which replay it at load
                parts.append(partition_result(pd.index, E.invalid_topic_exception,
                                              message=f"Cannot append to internal topic {topic.name}"))
            else:
                entries.append((topic.name, pd.index, pd.records))
                slots.append((parts, len(parts)))
                parts.append(None)
        responses.append({"name": topic.name, "partition_responses": parts})
    response = None if acks == 0 else {"responses": responses, "throttle_time": 0}
    results = broker.replica_manager.append_records(acks, request.timeout.total_seconds(), entries) \
        if entries else []
    if isinstance(results, list):
        return _answer(broker, responses, slots, results, response)
    return _answer_later(broker, responses, slots, results, response)


def _answer(broker: Broker, responses: list[dict[str, Any]], slots: list[tuple[list[Any], int]],
            results: list[dict[str, Any]], response: dict[str, Any] | None) -> dict[str, Any] | None:
    for (parts, i), result in zip(slots, results, strict=True):
        parts[i] = result
    for t in responses:
        broker.metrics.errors_in(API_KEY, t["partition_responses"])
    return response


async def _answer_later(broker: Broker, responses: list[dict[str, Any]], slots: list[tuple[list[Any], int]],
                        results: Awaitable[list[dict[str, Any]]], response: dict[str, Any] | None
                        ) -> dict[str, Any] | None:
    return _answer(broker, responses, slots, await results, response)


def _refused(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, int]:
    """Topics this request may not write to, with the error: WRITE on the topic, and for a
    transactional producer WRITE on its transactional id as well (Kafka's checks)."""
    acls = broker.acls
    names = [t.name for t in request.topic_data]
    txn = getattr(request, "transactional_id", None)
    if txn is not None and not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return dict.fromkeys(names, E.transactional_id_authorization_failed)
    return dict.fromkeys(acls.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names),
                         E.topic_authorization_failed)
