"""Batch factories and readers shared by the storage tests."""

from __future__ import annotations

from collections.abc import Sequence

from strom.records.batch import iter_batches
from strom.records.codec import NONE, Record, build_batch, read_all
from strom.storage.log import AppendInfo, PartitionLog


def batch(
    n: int = 1,
    *,
    value: bytes = b"v",
    key: bytes | None = b"k",
    ts: int = 1_000,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = NONE,
) -> bytes:
    return build_batch(
        [(key, value + b"%d" % i) for i in range(n)],
        timestamp_ms=ts,
        timestamps=timestamps,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        codec=codec,
    )


def append(log: PartitionLog, *batches: bytes, leader_epoch: int = 0) -> AppendInfo:
    buf = bytearray(b"".join(batches))
    return log.append(buf, iter_batches(buf), leader_epoch)


def read_everything(log: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Concatenated batches from ``start`` (default: log start) to the high watermark."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.high_watermark:
        data = log.read(offset, max_bytes)
        assert data, f"no data at {offset} below the high watermark {log.high_watermark}"
        out += data
        offset = iter_batches(data)[-1].next_offset
    return bytes(out)


def records(log: PartitionLog, start: int | None = None) -> list[Record]:
    return read_all(read_everything(log, start))


def values(log: PartitionLog, start: int | None = None) -> list[bytes | None]:
    return [r.value for r in records(log, start)]
