"""Model-based test of PartitionLog: append, roll, truncate, DeleteRecords, flush, crash (with a
torn tail), clean close and reopen, compared after every step with a plain list of records."""

from __future__ import annotations

import os
import shutil
import tempfile
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from storage_helpers import append, read_everything

from strom.records.batch import iter_batches
from strom.records.codec import build_batch, read_all
from strom.storage.log import LogConfig, PartitionLog

CONFIG = LogConfig(segment_bytes=300, index_interval_bytes=64)

Rec = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


@dataclass
class ModelBatch:
    base_offset: int
    records: list[Rec]
    size: int

    @property
    def last_offset(self) -> int:
        return self.records[-1][0]


record = st.tuples(st.integers(0, 1000), st.none() | st.binary(max_size=6), st.binary(max_size=30))


class PartitionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="strom-model-"))
        self.path = self.tmp / "t-0"
        self.batches: list[ModelBatch] = []
        self.next_offset = 0
        self.log_start = 0

    @initialize()
    def open(self) -> None:
        self.log = PartitionLog.open(self.path, "t", 0, CONFIG)

    def teardown(self) -> None:
        self.log.close_handlers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- rules -----------------------------------------------------------------------------

    @rule(batches=st.lists(st.lists(record, min_size=1, max_size=3), min_size=1, max_size=3))
    def append(self, batches: list[list[tuple[int, bytes | None, bytes]]]) -> None:
        encoded = [
            build_batch(
                [(k, v) for _, k, v in recs], timestamp_ms=recs[0][0], timestamps=[t for t, _, _ in recs]
            )
            for recs in batches
        ]
        info = append(self.log, *encoded)
        assert info.first_offset == self.next_offset
        for recs, data in zip(batches, encoded, strict=True):
            base = self.next_offset
            rows = [(base + i, t, k, v) for i, (t, k, v) in enumerate(recs)]
            self.batches.append(ModelBatch(base, rows, len(data)))
            self.next_offset += len(recs)
        assert info.last_offset == self.next_offset - 1

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.next_offset))
        self.log.truncate_to(offset)
        if offset >= self.next_offset:
            return
        if offset < self.log_start:
            self.batches, self.next_offset, self.log_start = [], offset, offset
            return
        # The batch holding the offset goes with everything after it.
        self.batches = [b for b in self.batches if b.last_offset < offset]
        self.next_offset = self.batches[-1].last_offset + 1 if self.batches else self._first_segment_base()
        self.log_start = min(self.log_start, self.next_offset)

    @precondition(lambda self: self.next_offset > self.log_start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        new_start = data.draw(st.integers(self.log_start, self.next_offset))
        self.log.delete_records(new_start)
        self.log_start = new_start
        first_base = self.log.segments()[0].base_offset
        self.batches = [b for b in self.batches if b.base_offset >= first_base]

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.next_offset

    @rule(chop=st.integers(0, 400), forget_recovery_point=st.booleans())
    def crash_and_reopen(self, chop: int, forget_recovery_point: bool) -> None:
        active = self.log.segments()[-1]
        recovery_point = 0 if forget_recovery_point else self.log.recovery_point
        self.log.close_handlers()
        if chop and active.size:
            cut = max(active.size - chop, 0)
            os.truncate(active.log_path, cut)
            # The active segment holds the model's last batches; those not whole any more are lost.
            position = active.size
            while self.batches and self.batches[-1].base_offset >= active.base_offset:
                position -= self.batches[-1].size
                if position + self.batches[-1].size <= cut:
                    break
                self.batches.pop()
            self.next_offset = self.batches[-1].last_offset + 1 if self.batches else active.base_offset
            if self.next_offset < self.log_start:
                self.batches, self.next_offset = [], self.log_start
        self.log = PartitionLog.open(
            self.path, "t", 0, CONFIG, recovery_point=recovery_point, log_start_offset=self.log_start
        )

    def _reopen_clean(self) -> None:
        """Open the log again as after a clean shutdown (everything up to the end recovered)."""
        self.log = PartitionLog.open(self.path, "t", 0, CONFIG, recovery_point=self.next_offset,
                                     log_start_offset=self.log_start, clean_shutdown=True)

    @rule()
    def close_and_reopen_clean(self) -> None:
        self.log.flush()
        self.log.close()
        self._reopen_clean()

    @rule(data=st.data())
    def damage_indexes_and_reopen_clean(self, data: st.DataObject) -> None:
        """Index files are only a cache: garbage, cut or missing ones are rebuilt from the log."""
        self.log.flush()
        self.log.close()
        for path in sorted(self.path.glob("*index")):
            damage = data.draw(st.sampled_from(["keep", "garbage", "cut", "empty", "delete"]))
            if damage == "garbage":
                path.write_bytes(data.draw(st.binary(min_size=1, max_size=40)))
            elif damage == "cut":
                path.write_bytes(path.read_bytes()[: data.draw(st.integers(0, 30))])
            elif damage == "empty":
                path.write_bytes(b"")
            elif damage == "delete":
                path.unlink()
        self._reopen_clean()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def corrupt_a_batch_and_recover(self, data: st.DataObject) -> None:
        """A damaged byte anywhere (covered by the CRC or the magic byte): an unclean start from
        recovery point 0 keeps exactly the batches before it."""
        victim = data.draw(st.integers(0, len(self.batches) - 1))
        segments = self.log.segments()
        seg = segments[bisect_right([s.base_offset for s in segments], self.batches[victim].base_offset) - 1]
        position = sum(b.size for b in self.batches[:victim] if b.base_offset >= seg.base_offset)
        where = position + data.draw(st.integers(16, self.batches[victim].size - 1))  # from the magic byte on
        self.log.close_handlers()
        with seg.log_path.open("r+b") as f:
            f.seek(where)
            byte = f.read(1)[0]
            f.seek(where)
            f.write(bytes([byte ^ data.draw(st.integers(1, 255))]))
        self.next_offset = self.batches[victim].base_offset
        del self.batches[victim:]
        if self.next_offset < self.log_start:  # nothing left at or after the log start
            self.batches, self.next_offset = [], self.log_start
        self.log = PartitionLog.open(self.path, "t", 0, CONFIG, log_start_offset=self.log_start)

    @rule(retention_bytes=st.integers(0, 1500))
    def retention(self, retention_bytes: int) -> None:
        self.log.config = replace(CONFIG, retention_ms=-1, retention_bytes=retention_bytes)
        try:
            deleted = self.log.delete_old_segments()
        finally:
            self.log.config = CONFIG
        if deleted:
            first_base = self.log.segments()[0].base_offset
            self.batches = [b for b in self.batches if b.base_offset >= first_base]
            self.log_start = max(self.log_start, first_base)
        # Kafka's rule: old segments go while what remains is still at least retention.bytes.
        segs = self.log.segments()
        assert self.log.size_bytes() - segs[0].size < retention_bytes or segs[0].size == 0

    @precondition(lambda self: self.next_offset > self.log_start)
    @rule(data=st.data(), max_bytes=st.integers(1, 700))
    def read_somewhere(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.log_start, self.next_offset - 1))
        got = self.log.read(offset, max_bytes)
        headers = iter_batches(got)  # whole, valid batches
        assert headers and headers[0].base_offset <= offset <= headers[0].last_offset
        assert len(got) <= max_bytes or len(headers) == 1
        start = next(i for i, b in enumerate(self.batches) if b.last_offset >= offset)
        expected = self.batches[start : start + len(headers)]
        assert [h.base_offset for h in headers] == [b.base_offset for b in expected]

    @rule(timestamp=st.integers(-1, 1001))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = next(
            (
                (o, t)
                for b in self.batches
                for o, t, _, _ in b.records
                if t >= timestamp and o >= self.log_start
            ),
            None,
        )
        assert self.log.offset_for_timestamp(timestamp) == expected

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert log.log_end_offset == log.high_watermark == self.next_offset
        assert log.log_start_offset == self.log_start
        got = [(r.offset, r.timestamp, r.key, r.value) for r in read_all(read_everything(log))]
        first_visible = next((i for i, b in enumerate(self.batches) if b.last_offset >= self.log_start), None)
        visible = self.batches[first_visible:] if first_visible is not None else []
        assert got == [r for b in visible for r in b.records]
        assert log.recovery_point <= log.log_end_offset

    def _first_segment_base(self) -> int:
        return self.log.segments()[0].base_offset


PartitionLogMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_partition_log_model = PartitionLogMachine.TestCase
