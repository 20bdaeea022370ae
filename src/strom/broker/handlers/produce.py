"""Produce (0): validate batch headers and CRCs, assign offsets, append, ack per acks.

No per-record work: only the 61-byte batch headers are read (compacted topics excepted: there each
record is read as far as its key length, and keyless records are refused, as in Kafka). With
log.flush.interval.messages reached (e.g. 1), the ack waits for the fsync; all partitions of a
request are flushed together (one fsync per log per request: group commit). The internal topics
(__consumer_offsets, __transaction_state) take no client writes: INVALID_TOPIC_EXCEPTION, as in Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from strom.broker.topics import INTERNAL_TOPICS
from strom.protocol.errors import ErrorCode as E
from strom.records.batch import BatchHeader, InvalidRecordBatch, iter_batches
from strom.records.codec import max_inflated_size, null_key_indexes
from strom.security.acl import AclOperation, ResourceType
from strom.storage.producer_state import SequenceStatus

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.replication.partition import Partition
    from strom.storage.log import PartitionLog

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 11

NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
NOT_ENOUGH_REPLICAS = 19
INVALID_RECORD = 87
TOPIC_AUTHORIZATION_FAILED = 29
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

_ERROR_BY_NAME = {"corrupt_message": CORRUPT_MESSAGE, "unsupported_for_message_format": UNSUPPORTED_FOR_MESSAGE_FORMAT}
# Keyless records listed in a refusal's record_errors (the batch is refused whole either way).
MAX_RECORD_ERRORS = 1000


def _result(index: int, error: int, base_offset: int = -1, log_start: int = -1,
            append_time: int = -1, message: str | None = None,
            record_errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "index": index,
        "error_code": error,
        "base_offset": base_offset,
        "log_append_time": append_time if append_time >= 0 else None,
        "log_start_offset": log_start,
        "error_message": message,
    }
    if record_errors:
        result["record_errors"] = record_errors  # Produce v8+; older versions drop it
    return result


def _refuse_keyless(broker: Broker, plog: PartitionLog, index: int, buf: bytearray | memoryview,
                    headers: list[BatchHeader]) -> dict[str, Any] | None:
    """A compacted topic takes only records with a key (Kafka's LogValidator).

    The first batch holding keyless records fails the partition with INVALID_RECORD, their
    batch-relative indexes in record_errors; None when every record has a key.
    """
    # A compressed batch is read a chunk at a time, and refused (CORRUPT_MESSAGE) when its records
    # would decompress past this bound: the log cleaner reads it later under the same one.
    max_size = max_inflated_size(plog.config.max_message_bytes)
    for h in headers:
        try:
            keyless = null_key_indexes(buf, h, max_size, limit=MAX_RECORD_ERRORS)
        except InvalidRecordBatch as e:
            return _result(index, CORRUPT_MESSAGE, message=str(e))
        if keyless:
            tp = f"{plog.topic}-{plog.partition}"
            each = f"Compacted topic cannot accept a record without a key in topic partition {tp}."
            count = f"{len(keyless)}{' or more' if len(keyless) == MAX_RECORD_ERRORS else ''}"
            return _result(index, INVALID_RECORD, log_start=plog.log_start_offset,
                           message=f"Batch refused: {count} record(s) without a key, and topic partition {tp} "
                                   "is compacted (cleanup.policy has compact); see record_errors",
                           record_errors=[{"batch_index": i, "batch_index_error_message": each} for i in keyless])
    return None


def append_partition(broker: Broker, plog: PartitionLog, index: int,
                     records: bytes | memoryview | None, leader_epoch: int = 0) -> dict[str, Any]:
    """Validate and append one partition's batches; returns the partition's response fields.

    ``records`` is a view of the request frame (wire.decode_request); when that frame was read in
    place it is writable and the offsets go straight into it, otherwise (small frames) into a copy.
    """
    if not records:
        return _result(index, CORRUPT_MESSAGE, message="empty record set")
    buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    try:
        headers = iter_batches(buf)
    except InvalidRecordBatch as e:
        return _result(index, _ERROR_BY_NAME.get(e.error, CORRUPT_MESSAGE), message=str(e))
    max_bytes = plog.config.max_message_bytes
    for h in headers:
        if h.size > max_bytes:
            return _result(index, MESSAGE_TOO_LARGE,
                           message=f"batch of {h.size} bytes exceeds max.message.bytes={max_bytes}")
        if h.records_count <= 0:
            return _result(index, INVALID_RECORD, message="batch without records")
        if h.is_control:  # COMMIT/ABORT markers come from transaction coordinators, never from clients
            return _result(index, INVALID_RECORD, message="control batches are written by the broker only")
    if plog.config.compact_enabled:
        refused = _refuse_keyless(broker, plog, index, buf, headers)
        if refused is not None:
            return refused
    # Idempotent producers: a retried batch is acknowledged with its original offsets, not written.
    state = plog.producer_state
    for h in headers:
        if h.producer_id < 0:
            continue
        check = state.check(h)
        if check.status is SequenceStatus.DUPLICATE:
            if len(headers) == 1:
                return _result(index, NONE, check.first_offset, plog.log_start_offset)
            return _result(index, INVALID_RECORD, message="duplicate batch mixed with new batches")
        if check.status is SequenceStatus.OUT_OF_ORDER_SEQUENCE:
            return _result(index, OUT_OF_ORDER_SEQUENCE_NUMBER,
                           message=f"out of order sequence {h.base_sequence} for producer {h.producer_id}")
        if check.status is SequenceStatus.INVALID_PRODUCER_EPOCH:
            return _result(index, INVALID_PRODUCER_EPOCH,
                           message=f"producer epoch {h.producer_epoch} is older than the current one")
    info = plog.append(buf, headers, leader_epoch=leader_epoch)
    broker.metrics.produced(plog.topic, len(buf), headers)
    broker.purgatory.notify((plog.topic, plog.partition))
    return _result(index, NONE, info.first_offset, info.log_start_offset, info.log_append_time)


def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any] | None | Awaitable[dict[str, Any] | None]:
    """Appends on the spot; returns an awaitable only when the ack must wait (an fsync, or in a
    cluster with acks=all the ISR)."""
    acks = request.acks
    replicas = broker.replicas  # None on a single broker: it leads every partition
    to_flush: list[PartitionLog] = []
    waits: list[tuple[Partition, int, dict[str, Any]]] = []
    responses = []
    refused = _refused(broker, ctx, request) if broker.acls.enabled else {}
    for topic in request.topic_data:
        parts = []
        internal = topic.name in INTERNAL_TOPICS
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                parts.append(_result(pd.index, INVALID_REQUIRED_ACKS))
                continue
            if refused and (refusal := refused.get(topic.name)):
                parts.append(_result(pd.index, refusal))
                continue
            if internal:  # written by the coordinators only, which replay it at load
                parts.append(_result(pd.index, E.invalid_topic_exception,
                                     message=f"Cannot append to internal topic {topic.name}"))
                continue
            epoch = 0
            part = None
            if replicas is None:
                plog = broker.log_manager.get_log(topic.name, pd.index)
                if plog is None:
                    parts.append(_result(pd.index, UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            else:
                part, error = replicas.leader_partition(topic.name, pd.index)
                if part is None:
                    parts.append(_result(pd.index, error))
                    continue
                plog, epoch = part.log, part.leader_epoch
                if acks == -1 and len(part.isr) < plog.config.min_insync_replicas:
                    parts.append(_result(pd.index, NOT_ENOUGH_REPLICAS,
                                         message=f"ISR {list(part.isr)} is smaller than min.insync.replicas="
                                                 f"{plog.config.min_insync_replicas}"))
                    continue
            result = append_partition(broker, plog, pd.index, pd.records, epoch)
            if result["error_code"] == NONE:
                if plog.needs_flush():
                    to_flush.append(plog)
                if part is not None:
                    assert replicas is not None
                    replicas.appended(part)
                    if acks == -1:
                        waits.append((part, plog.log_end_offset, result))
            parts.append(result)
        responses.append({"name": topic.name, "partition_responses": parts})
    response = None if acks == 0 else {"responses": responses, "throttle_time": 0}
    if to_flush or waits:
        return _wait_then(broker, to_flush, waits, request.timeout.total_seconds(), response)
    for t in responses:
        broker.metrics.errors_in(API_KEY, t["partition_responses"])
    return response


def _refused(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, int]:
    """Topics this request may not write to, with the error: WRITE on the topic, and for a
    transactional producer WRITE on its transactional id as well (Kafka's checks)."""
    acls = broker.acls
    names = [t.name for t in request.topic_data]
    txn = getattr(request, "transactional_id", None)
    if txn is not None and not acls.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return dict.fromkeys(names, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return dict.fromkeys(acls.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names),
                         TOPIC_AUTHORIZATION_FAILED)


async def _wait_then(broker: Broker, logs: list[PartitionLog], waits: list[tuple[Partition, int, dict[str, Any]]],
                     timeout_s: float, response: dict[str, Any] | None) -> dict[str, Any] | None:
    """Group commit (every partition of the request fsynced in the thread pool), then for acks=all
    in a cluster the wait for the ISR (purgatory), then the ack."""
    if logs:
        await _flush(logs)
    if waits:
        assert broker.replicas is not None
        await broker.replicas.wait_for_acks(waits, timeout_s,
                                            {p.key: p.log.config.min_insync_replicas for p, _, _ in waits})
    if response is not None:
        for t in response["responses"]:
            broker.metrics.errors_in(API_KEY, t["partition_responses"])
    return response


async def _flush(logs: list[PartitionLog]) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in logs))
