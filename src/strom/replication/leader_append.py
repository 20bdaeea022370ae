"""Appending to a partition as its leader: check what a client sent, then write it (Kafka's
LogValidator and UnifiedLog.appendAsLeader).

No per-record work: only the 61-byte batch headers are read (compacted topics excepted: there each
record is read as far as its key length, and keyless records are refused, as in Kafka). The
result is a Produce response's partition entry; the replica manager adds the high watermark step,
the wake-up of waiting fetches and the wait for acks (replica_manager.append_records).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.records.batch import BatchHeader, InvalidRecordBatch, iter_batches
from strom.records.codec import max_inflated_size, null_key_indexes
from strom.storage.producer_state import SequenceStatus

if TYPE_CHECKING:
    from strom.storage.log import PartitionLog

_ERROR_BY_NAME = {"corrupt_message": E.corrupt_message,
                  "unsupported_for_message_format": E.unsupported_for_message_format}
# Keyless records listed in a refusal's record_errors (the batch is refused whole either way).
MAX_RECORD_ERRORS = 1000


class AppendOrigin(enum.Enum):
    """Who writes (Kafka's AppendOrigin): a client's batches are checked; a coordinator's (its
    records, transaction markers) are the broker's own and go in as they are."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


def partition_result(index: int, error: int, base_offset: int = -1, log_start: int = -1,
                     append_time: int = -1, message: str | None = None,
                     record_errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One partition's entry of a Produce response."""
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


def _refuse_keyless(plog: PartitionLog, index: int, buf: bytearray | memoryview,
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
            return partition_result(index, E.corrupt_message, message=str(e))
        if keyless:
            tp = f"{plog.topic}-{plog.partition}"
            each = f"Compacted topic cannot accept a record without a key in topic partition {tp}."
            count = f"{len(keyless)}{' or more' if len(keyless) == MAX_RECORD_ERRORS else ''}"
            return partition_result(
                index, E.invalid_record, log_start=plog.log_start_offset,
                message=f"Batch refused: {count} record(s) without a key, and topic partition {tp} "
                        "is compacted (cleanup.policy has compact); see record_errors",
                record_errors=[{"batch_index": i, "batch_index_error_message": each} for i in keyless])
    return None


def append_client_batches(plog: PartitionLog, index: int, records: bytes | bytearray | memoryview | None,
                          leader_epoch: int) -> tuple[dict[str, Any], list[BatchHeader]]:
    """Validate and append one partition's batches from a client: (the partition's response
    entry, the batches appended, empty when refused).

    ``records`` is a view of the request frame (wire.decode_request); when that frame was read in
    place it is writable and the offsets go straight into it, otherwise (small frames) into a copy.
    """
    if not records:
        return partition_result(index, E.corrupt_message, message="empty record set"), []
    buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    try:
        headers = iter_batches(buf)
    except InvalidRecordBatch as e:
        return partition_result(index, _ERROR_BY_NAME.get(e.error, E.corrupt_message), message=str(e)), []
    max_bytes = plog.config.max_message_bytes
    for h in headers:
        if h.size > max_bytes:
            return partition_result(index, E.message_too_large,
                                    message=f"batch of {h.size} bytes exceeds max.message.bytes={max_bytes}"), []
        if h.records_count <= 0:
            return partition_result(index, E.invalid_record, message="batch without records"), []
        if h.is_control:  # COMMIT/ABORT markers come from transaction coordinators, never from clients
            return partition_result(index, E.invalid_record,
                                    message="control batches are written by the broker only"), []
    if plog.config.compact_enabled:
        refused = _refuse_keyless(plog, index, buf, headers)
        if refused is not None:
            return refused, []
    # Idempotent producers: a retried batch is acknowledged with its original offsets, not written.
    state = plog.producer_state
    for h in headers:
        if h.producer_id < 0:
            continue
        check = state.check(h)
        if check.status is SequenceStatus.DUPLICATE:
            if len(headers) == 1:
                return partition_result(index, E.none, check.first_offset, plog.log_start_offset), []
            return partition_result(index, E.invalid_record, message="duplicate batch mixed with new batches"), []
        if check.status is SequenceStatus.OUT_OF_ORDER_SEQUENCE:
            return partition_result(
                index, E.out_of_order_sequence_number,
                message=f"out of order sequence {h.base_sequence} for producer {h.producer_id}"), []
        if check.status is SequenceStatus.INVALID_PRODUCER_EPOCH:
            return partition_result(
                index, E.invalid_producer_epoch,
                message=f"producer epoch {h.producer_epoch} is older than the current one"), []
    info = plog.append(buf, headers, leader_epoch=leader_epoch)
    return partition_result(index, E.none, info.first_offset, info.log_start_offset, info.log_append_time), headers


def append_own_batches(plog: PartitionLog, index: int, records: bytes | bytearray | memoryview,
                       leader_epoch: int) -> tuple[dict[str, Any], list[BatchHeader]]:
    """Append batches the broker built itself (a coordinator's records, transaction markers)."""
    buf = records if isinstance(records, bytearray) else bytearray(records)
    headers = iter_batches(buf)
    info = plog.append(buf, headers, leader_epoch=leader_epoch)
    return partition_result(index, E.none, info.first_offset, info.log_start_offset, info.log_append_time), headers


async def group_commit(logs: Iterable[PartitionLog]) -> None:
    """fsync every log at once in the thread pool: one fsync per log for all the records a request
    (or a follower's fetch, or a coordinator's write) appended to it."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in logs))
