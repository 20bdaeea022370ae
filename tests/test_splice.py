"""Records spliced beside the encoded Fetch response must give the very bytes kio would encode."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from strom.protocol import splice, wire
from strom.protocol.build import build
from strom.protocol.splice import BlobSplicer


def _fetch_body(records: list[bytes], version: int) -> dict[str, Any]:
    """Two topics holding the same partitions' records."""
    key = "topic_id" if version >= 13 else "topic"
    topics = [{key: uuid.UUID(int=t) if version >= 13 else f"t{t}",
               "partitions": [{"partition_index": i, "high_watermark": 10 + i, "records": r}
                              for i, r in enumerate(records)]} for t in (1, 2)]
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": topics}


@pytest.mark.parametrize("version", [4, 11, 12, 16])
@pytest.mark.parametrize("sizes", [[0], [100], [5000], [0, 70_000, 300, 1_000_000], [200, 4096, 4095, 130]])
def test_spliced_frame_equals_the_plain_encoding(version: int, sizes: list[int]) -> None:
    records = [os.urandom(n) for n in sizes]
    cls = wire.response_class(1, version)
    plain = wire.encode_response(1, version, 99, build(cls, _fetch_body(records, version)))

    blobs = BlobSplicer()
    body = _fetch_body(records, version)
    for topic in body["responses"]:
        topic["partitions"] = [dict(p, records=blobs.hold(p["records"])) for p in topic["partitions"]]
    held = sum(n >= splice.MIN_SPLICE for n in sizes) * 2
    assert len(blobs) == held
    frame = wire.encode_response(1, version, 99, build(cls, body))
    parts = blobs.splice(frame, compact=cls.__flexible__)
    assert b"".join(bytes(p) for p in parts) == plain
    # The large blobs are passed on as the very objects, not copies.
    assert sum(any(p is r for r in records) for p in parts) == held


def test_a_missing_marker_is_an_error_not_a_wrong_frame() -> None:
    blobs = BlobSplicer()
    blobs.hold(b"x" * splice.MIN_SPLICE)
    with pytest.raises(ValueError):
        blobs.splice(b"\0\0\0\4abcd", compact=True)
