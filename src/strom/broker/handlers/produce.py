"""Produce (0): check who may write where, then make one call down to the replica manager.

Authorization (WRITE on each topic, and on the transactional id for a transactional producer),
the acks value and the internal topics (__consumer_offsets, __transaction_state take no client
writes: INVALID_TOPIC_EXCEPTION, as in Kafka) are checked here; everything else about the write
(the batches' checks, min.insync.replicas, the append, the fsync of log.flush.interval.messages,
the wait for the ISR with acks=all) is ReplicaManager.append_records's.

v13 names each topic by its id (KIP-516): an id this cluster does not know answers UNKNOWN_TOPIC_ID.
v12 is the first version of transactions V2 (KIP-890 part 2), where a transactional batch adds its
partition to the transaction itself. strom finalizes no ``transaction.version`` (its ApiVersions
carries no features), so clients keep the explicit AddPartitionsToTxn of transactions V1 and send
their transactional batches at v11 at most; a transactional request at v12+ is refused per
partition with UNSUPPORTED_VERSION, as Kafka refuses it when transaction.version 2 is not finalized,
instead of being appended to a transaction that may not hold the partition.
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
MAX_VERSION = 13
TRANSACTIONS_V2_VERSION = 12  # a transactional batch adds its partition (transaction.version 2)
TOPIC_ID_VERSION = 13

def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any] | None | Awaitable[dict[str, Any] | None]:
    """Appends on the spot; returns an awaitable only when the ack must wait (an fsync, or with
    acks=all the ISR)."""
    acks = request.acks
    version = ctx.api_version
    names = _topic_names(broker, request) if version >= TOPIC_ID_VERSION else [t.name for t in request.topic_data]
    refused = _refused(broker, ctx, request, names) if broker.acls.enabled else {}
    txn_v2 = version >= TRANSACTIONS_V2_VERSION and request.transactional_id is not None
    responses = []
    entries: list[tuple[str, int, Any]] = []  # what the replica manager appends
    slots: list[tuple[list[dict[str, Any] | None], int]] = []  # where each of its results goes
    for topic, name in zip(request.topic_data, names, strict=True):
        parts: list[dict[str, Any] | None] = []
        internal = name in INTERNAL_TOPICS
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                parts.append(partition_result(pd.index, E.invalid_required_acks))
            elif name is None:  # v13: an id this cluster does not know
                parts.append(partition_result(pd.index, E.unknown_topic_id))
            elif txn_v2:
                parts.append(partition_result(
                    pd.index, E.unsupported_version,
                    message="transaction.version 2 is not finalized: transactional batches go at Produce v11 "
                            "or lower, after AddPartitionsToTxn"))
            elif refused and (refusal := refused.get(name)):
                parts.append(partition_result(pd.index, refusal))
            elif internal:  # written by the coordinators only, which replay it at load
                parts.append(partition_result(pd.index, E.invalid_topic_exception,
                                              message=f"Cannot append to internal topic {name}"))
            else:
                entries.append((name, pd.index, pd.records))
                slots.append((parts, len(parts)))
                parts.append(None)
        # Both keys: the version's schema takes the one it has (v13 the id, before it the name).
        responses.append({"name": name, "topic_id": getattr(topic, "topic_id", None), "partition_responses": parts})
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


def _topic_names(broker: Broker, request: Any) -> list[str | None]:
    """v13: each topic's name from its id (None for an id this cluster does not know)."""
    by_id = broker.metadata.topic_by_id
    return [info.name if (info := by_id(t.topic_id)) is not None else None for t in request.topic_data]


def _refused(broker: Broker, ctx: RequestContext, request: Any, topic_names: list[str | None]) -> dict[str, int]:
    """Topics this request may not write to, with the error: WRITE on the topic, and for a
    transactional producer WRITE on its transactional id as well (Kafka's checks)."""
    acls = broker.acls
    names = [n for n in topic_names if n is not None]
    txn = getattr(request, "transactional_id", None)
    if txn is not None and not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return dict.fromkeys(names, E.transactional_id_authorization_failed)
    return dict.fromkeys(acls.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names),
                         E.topic_authorization_failed)
