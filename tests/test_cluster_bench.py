"""The pure parts of benchmarks/cluster_bench.py: the acknowledgement gap, the follower lag in time, and
the log end offset read from a segment file while it grows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from strom.records.codec import build_batch

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "cluster_bench.py"


@pytest.fixture(scope="module")
def cb() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cluster_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_outage_is_the_longest_silence_ending_after_the_signal(cb: ModuleType) -> None:
    acks = [0.0, 0.1, 0.2, 1.0, 1.01, 1.02, 4.5, 4.51]  # unsorted input is fine too
    # A longer silence before the signal does not count; late responses of the dying leader (1.01,
    # 1.02 after a signal at 1.005) move the start of the outage.
    assert cb.outage(list(reversed(acks)), 1.005) == (1.02, 4.5)
    assert cb.outage([0.0, 0.1], 0.5) is None  # nothing acknowledged after the signal


def test_time_lag_is_an_upper_bound_to_one_sampling_interval(cb: ModuleType) -> None:
    t = [0.0, 0.01, 0.02, 0.03]
    leader = [10, 20, 20, 30]
    follower = [10, 10, 20, 20]
    # Sample 1: the follower lacks offset 10, which the leader did not have at sample 0: <= 10 ms.
    # Sample 3: it lacks offset 20, first seen at the leader at sample 3, absent at sample 2: <= 10 ms.
    assert cb.time_lags(t, leader, follower) == pytest.approx([0.0, 0.01, 0.0, 0.01])
    # Still lacking offset 10 two samples later: <= 20 ms.
    assert cb.time_lags(t[:3], [10, 20, 30], [10, 10, 10])[2] == pytest.approx(0.02)


def _batch(base_offset: int, count: int) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(count)], base_offset=base_offset, timestamp_ms=1)


def test_log_end_reader_follows_a_growing_segment_and_a_roll(cb: ModuleType, tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    reader = cb.LogEndReader(part)
    assert reader.log_end() == 0  # no segment yet
    first = part / f"{0:020d}.log"
    first.write_bytes(b"")
    assert reader.log_end() == 0
    b1, b2 = _batch(0, 3), _batch(3, 2)
    with open(first, "ab") as f:
        f.write(b1 + b2[:20])  # the second batch only partly written
    assert reader.log_end() == 3
    with open(first, "ab") as f:
        f.write(b2[20:])
    assert reader.log_end() == 5
    second = part / f"{5:020d}.log"
    second.write_bytes(b"")  # rolled: an empty active segment ends at its base offset
    assert reader.log_end() == 5
    second.write_bytes(_batch(5, 4))
    assert reader.log_end() == 9
    second.write_bytes(_batch(5, 1))  # truncated and rewritten (a follower matching its leader)
    assert reader.log_end() == 6
    reader.close()


def test_batch_digest_lists_whole_batches_only(cb: ModuleType, tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    b1, b2 = _batch(0, 3), _batch(3, 2)
    (part / f"{0:020d}.log").write_bytes(b1 + b2[:30])
    digest = cb.batch_digest(part)
    assert [(base, length + 12) for base, length, _ in digest] == [(0, len(b1))]
    assert digest[0][2] == int.from_bytes(b1[17:21], "big")
