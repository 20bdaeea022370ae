"""records.batch under hypothesis: concatenations split back exactly, corruption never crashes
with anything but InvalidRecordBatch; the storage scanner is as robust on random file bytes."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.records.batch import HEADER_SIZE, InvalidRecordBatch, iter_batches
from strom.records.codec import GZIP, NONE, build_batch, read_all
from strom.storage.segment import iter_headers

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

record = st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=24))
batch_spec = st.tuples(st.lists(record, min_size=1, max_size=4), st.sampled_from([NONE, GZIP]))


def build(specs: list[tuple[list[tuple[bytes | None, bytes | None]], int]]) -> bytes:
    return b"".join(
        build_batch(recs, codec=codec, base_offset=i * 10) for i, (recs, codec) in enumerate(specs)
    )


@SETTINGS
@given(st.lists(batch_spec, max_size=5))
def test_concatenation_splits_back(specs: list[tuple[list[tuple[bytes | None, bytes | None]], int]]) -> None:
    buf = build(specs)
    headers = iter_batches(buf)
    assert len(headers) == len(specs)
    assert sum(h.size for h in headers) == len(buf)
    assert [(r.key, r.value) for r in read_all(buf)] == [kv for recs, _ in specs for kv in recs]


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
)


def mutate(buf: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(buf)
    for kind, where, value in mutations:
        if not data:
            break
        i = where % len(data)
        if kind == "flip":
            data[i] ^= value
        elif kind == "cut":
            del data[i:]
        else:
            data.insert(i, value)
    return bytes(data)


@SETTINGS
@given(
    st.lists(batch_spec, min_size=1, max_size=4), st.lists(mutation, min_size=1, max_size=4), st.booleans()
)
def test_corruption_raises_only_invalid_record_batch(
    specs: list[tuple[list[tuple[bytes | None, bytes | None]], int]],
    mutations: list[tuple[str, int, int]],
    verify_crc: bool,
) -> None:
    data = mutate(build(specs), mutations)
    try:
        headers = iter_batches(data, verify_crc=verify_crc)
    except InvalidRecordBatch:
        return
    assert sum(h.size for h in headers) == len(data)


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_invalid_record_batch(data: bytes) -> None:
    try:
        headers = iter_batches(data)
    except InvalidRecordBatch:
        return
    assert sum(h.size for h in headers) == len(data)


@SETTINGS
@given(
    st.lists(batch_spec, min_size=1, max_size=4),
    st.lists(mutation, max_size=3),
    st.integers(HEADER_SIZE, 200),
)
def test_segment_scanner_yields_only_valid_prefix(
    specs: list[tuple[list[tuple[bytes | None, bytes | None]], int]],
    mutations: list[tuple[str, int, int]],
    chunk: int,
) -> None:
    clean = build(specs)
    data = mutate(clean, mutations)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        fd = f.fileno()
        headers = list(iter_headers(fd, 0, len(data), verify=True, chunk=chunk))
        end = headers[-1].position + headers[-1].size if headers else 0
        assert end <= len(data)
        # What the scanner accepts is exactly what iter_batches accepts for those bytes.
        assert iter_batches(os.pread(fd, end, 0)) == headers
        if data == clean:
            assert end == len(data)
