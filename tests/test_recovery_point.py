"""The recovery point follows segment rolls (Kafka flushes a log when it rolls), and its checkpoint is
written every log.flush.offset.checkpoint.interval.ms: after a SIGKILL only the tail is re-checked."""

from __future__ import annotations

import re
import time
from pathlib import Path

from helpers import RawConnection, values_batch


def _checkpointed(data_dir: Path, topic: str, partition: int) -> int | None:
    path = data_dir / "recovery-point-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        t, p, offset = line.split()
        if (t, int(p)) == (topic, partition):
            return int(offset)
    return None


def _segment_bases(data_dir: Path, topic: str, partition: int) -> list[int]:
    return sorted(int(f.name[:-4]) for f in (data_dir / f"{topic}-{partition}").glob("*.log"))


def test_rolls_move_the_recovery_point_and_a_crash_rechecks_only_the_tail(broker_factory) -> None:
    b = broker_factory(overrides={"log.segment.bytes": "16384", "log.flush.offset.checkpoint.interval.ms": "300"})
    data_dir = b.data_dir
    with RawConnection(b.bootstrap) as conn:
        assert int(conn.create_topic("rp", 1).error_code) == 0
        for i in range(30):  # ~10 KB per request: a roll every other request
            batch = values_batch([f"v{i}-{j}".encode() * 40 for j in range(20)])
            assert int(conn.produce("rp", 0, batch, acks=1).error_code) == 0
        sent = [r.value for r in conn.fetch_records("rp", 0)]
    assert len(sent) == 600
    bases = _segment_bases(data_dir, "rp", 0)
    assert len(bases) >= 10
    # No flush policy is configured: only the rolls flush. The checkpoint catches up within a few intervals.
    deadline = time.monotonic() + 15
    while (_checkpointed(data_dir, "rp", 0) or 0) < bases[-1]:
        assert time.monotonic() < deadline, f"recovery point {_checkpointed(data_dir, 'rp', 0)} < {bases[-1]}"
        time.sleep(0.1)

    b.kill()
    b.start()
    line = next(ln for ln in b.log_lines if "unclean shutdown: re-checking" in ln and "rp-0" in ln)
    checked, total = map(int, re.search(r"re-checking (\d+) of (\d+) segments", line).groups())  # type: ignore[union-attr]
    assert checked == 1 and total == len(bases), line
    with RawConnection(b.bootstrap) as conn:
        assert [r.value for r in conn.fetch_records("rp", 0)] == sent
