"""Keys and values of the __transaction_state topic, byte-compatible with Kafka.

Key ``TransactionLogKey`` v0: version int16 (0), transactional id (string). Value
``TransactionLogValue`` (we write v0, read v0 and the flexible v1): producer id, producer epoch,
transaction timeout, status (int8, Kafka's TransactionState ids), partitions (nullable array of
topic + partition ids), last update and start timestamps. A null value is a tombstone (an expired
transactional id).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from strom.coordinator.records import Reader, RecordFormatError, Writer

KEY_VERSION = 0
VALUE_VERSION = 0


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with its on-disk ids."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions use."""
        return "".join(w.capitalize() for w in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...] = field(default=())
    last_update_ms: int = -1
    start_ms: int = -1


def encode_key(transactional_id: str) -> bytes:
    return bytes(Writer().int16(KEY_VERSION).string(transactional_id).buf)


def decode_key(data: bytes) -> str | None:
    """The transactional id; None for a key version this broker does not know."""
    r = Reader(data)
    if r.int16() != KEY_VERSION:
        return None
    return r.string()


def encode_value(v: TxnLogValue) -> bytes:
    w = Writer().int16(VALUE_VERSION).int64(v.producer_id).int16(v.producer_epoch).int32(v.timeout_ms)
    w.buf.append(int(v.state))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in v.partitions:
        by_topic.setdefault(topic, []).append(partition)
    w.int32(len(by_topic))
    for topic, ids in sorted(by_topic.items()):
        w.string(topic).int32(len(ids))
        for i in sorted(ids):
            w.int32(i)
    w.int64(v.last_update_ms).int64(v.start_ms)
    return bytes(w.buf)


def decode_value(data: bytes) -> TxnLogValue:
    r = Reader(data)
    version = r.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status = r.int8()
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state {status}") from None
    partitions: list[tuple[str, int]] = []
    for _ in range(r.array_length()):
        topic = r.string()
        for _p in range(r.array_length()):
            partitions.append((topic, r.int32()))
        r.skip_tagged_fields()
    last_update = r.int64()
    start = r.int64()
    r.skip_tagged_fields()
    return TxnLogValue(producer_id, epoch, timeout, state, tuple(partitions), last_update, start)
