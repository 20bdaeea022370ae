"""Control records: the COMMIT and ABORT markers that end a transaction on a partition.

A control batch has the transactional and control attribute bits set, the producer id and epoch of
the transaction it ends, no sequence, and exactly one record (Kafka's EndTransactionMarker):
key = version int16 (0) + type int16 (0 ABORT, 1 COMMIT), value = version int16 (0) +
coordinator epoch int32. Sans-IO.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from strom.records import batch as rb
from strom.records import codec

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class Marker(NamedTuple):
    type: ControlType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.type is ControlType.COMMIT


def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       timestamp_ms: int) -> bytes:
    """One control batch holding a COMMIT or ABORT marker, CRC included, base offset 0."""
    key = _KEY.pack(CONTROL_KEY_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)
    value = _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)
    return codec.build_batch([(key, value)], timestamp_ms=timestamp_ms, producer_id=producer_id,
                             producer_epoch=producer_epoch,
                             attributes_extra=rb.TRANSACTIONAL_MASK | rb.CONTROL_MASK)


def read_marker(buf: bytes | bytearray | memoryview, header: rb.BatchHeader) -> Marker | None:
    """The marker in a control batch; None for a control batch of another kind (or unreadable)."""
    try:
        record = next(codec.iter_records(memoryview(buf), header), None)
    except (rb.InvalidRecordBatch, ValueError):
        return None
    if record is None or record.key is None or len(record.key) < _KEY.size:
        return None
    _version, kind = _KEY.unpack_from(record.key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    epoch = -1
    if record.value is not None and len(record.value) >= _VALUE.size:
        epoch = _VALUE.unpack_from(record.value)[1]
    return Marker(ControlType(kind), epoch)
