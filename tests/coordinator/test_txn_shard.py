"""The transaction coordinator's state machine on its own (no broker): InitProducerId epochs and
fencing, AddPartitionsToTxn, EndTxn and its retries, pending writes, timeouts, and the
__transaction_state record format."""

from __future__ import annotations

import itertools

from strom.coordinator.txn_records import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.coordinator.txn_shard import TransactionCoordinatorShard, TxnConfig, TxnOutcome
from strom.protocol.errors import ErrorCode as E

S = TxnState


def shard() -> tuple[TransactionCoordinatorShard, itertools.count[int]]:
    return TransactionCoordinatorShard(TxnConfig(max_timeout_ms=60_000)), itertools.count(1000)


def written(s: TransactionCoordinatorShard, txn_id: str, outcome: TxnOutcome) -> TxnOutcome:
    """What the runtime does once the write succeeded."""
    assert outcome.write is not None
    s.apply(txn_id, outcome.write)
    return outcome


def test_record_format_round_trip() -> None:
    value = TxnLogValue(7, 3, 60000, S.ONGOING, (("a", 0), ("a", 2), ("b", 1)), 123, 100)
    assert decode_key(encode_key("my-id")) == "my-id"
    assert decode_value(encode_value(value)) == value


def test_init_bump_fence_and_commit() -> None:
    s, ids = shard()
    assert s.init_producer_id(0, "t", 70_000, -1, -1, ids.__next__).error is E.invalid_transaction_timeout
    first = written(s, "t", s.init_producer_id(0, "t", 10_000, -1, -1, ids.__next__))
    assert (first.producer_id, first.producer_epoch) == (1000, 0)
    again = written(s, "t", s.init_producer_id(1, "t", 10_000, -1, -1, ids.__next__))
    assert (again.producer_id, again.producer_epoch) == (1000, 1)  # same id, epoch + 1
    pid, epoch = again.producer_id, again.producer_epoch
    assert s.add_partitions(2, "t", pid, epoch - 1, [("x", 0)]).error is E.producer_fenced
    assert s.add_partitions(2, "t", pid + 1, epoch, [("x", 0)]).error is E.invalid_producer_id_mapping
    added = s.add_partitions(2, "t", pid, epoch, [("x", 0)])
    assert s.add_partitions(2, "t", pid, epoch, [("x", 1)]).error is E.concurrent_transactions  # write in flight
    written(s, "t", added)
    assert s.add_partitions(3, "t", pid, epoch, [("x", 0)]).write is None  # already in: nothing to write
    written(s, "t", s.add_partitions(3, "t", pid, epoch, [("x", 1)]))
    assert s.txns["t"].partitions == {("x", 0), ("x", 1)} and s.txns["t"].start_ms == 2
    prepare = written(s, "t", s.end_txn(4, "t", pid, epoch, commit=True))
    assert prepare.write is not None and prepare.write.state is S.PREPARE_COMMIT
    assert s.end_txn(5, "t", pid, epoch, commit=True).error is E.concurrent_transactions  # markers not written yet
    assert s.end_txn(5, "t", pid, epoch, commit=False).error is E.invalid_txn_state
    complete = s.complete(6, "t")
    assert complete is not None and complete.write is not None and complete.write.state is S.COMPLETE_COMMIT
    written(s, "t", complete)
    assert s.end_txn(7, "t", pid, epoch, commit=True).error is E.none  # a retry of a finished commit
    assert s.txns["t"].partitions == set()


def test_new_instance_aborts_and_fences_an_open_transaction() -> None:
    s, ids = shard()
    o = written(s, "t", s.init_producer_id(0, "t", 10_000, -1, -1, ids.__next__))
    written(s, "t", s.add_partitions(1, "t", o.producer_id, o.producer_epoch, [("x", 0)]))
    fence = s.init_producer_id(2, "t", 10_000, -1, -1, ids.__next__)
    assert fence.error is E.concurrent_transactions  # the client retries until the abort is done
    assert fence.write is not None and fence.write.state is S.PREPARE_ABORT
    assert fence.write.producer_epoch == o.producer_epoch + 1  # the markers carry the new epoch
    written(s, "t", fence)
    assert s.end_txn(3, "t", o.producer_id, o.producer_epoch, commit=True).error is E.producer_fenced
    written(s, "t", s.complete(4, "t"))  # type: ignore[arg-type]
    again = written(s, "t", s.init_producer_id(5, "t", 10_000, -1, -1, ids.__next__))
    assert again.producer_epoch == o.producer_epoch + 2


def test_kip360_retry_gets_the_same_answer() -> None:
    s, ids = shard()
    o = written(s, "t", s.init_producer_id(0, "t", 10_000, -1, -1, ids.__next__))
    bumped = written(s, "t", s.init_producer_id(1, "t", 10_000, o.producer_id, o.producer_epoch, ids.__next__))
    assert bumped.producer_epoch == o.producer_epoch + 1
    retry = s.init_producer_id(2, "t", 10_000, o.producer_id, o.producer_epoch, ids.__next__)
    assert retry.write is None and retry.producer_epoch == bumped.producer_epoch
    assert s.init_producer_id(3, "t", 10_000, o.producer_id + 5, 0, ids.__next__).error is E.producer_fenced


def test_brand_new_id_written_once() -> None:
    s, ids = shard()
    first = s.init_producer_id(0, "t", 10_000, -1, -1, ids.__next__)
    assert s.init_producer_id(0, "t", 10_000, -1, -1, ids.__next__).error is E.concurrent_transactions
    s.write_failed("t")  # the write failed: the id is free again
    assert first.write is not None and s.init_producer_id(1, "t", 10_000, -1, -1, ids.__next__).write is not None


def test_timed_out_transaction_is_fenced_and_aborted() -> None:
    s, ids = shard()
    o = written(s, "t", s.init_producer_id(0, "t", 1_000, -1, -1, ids.__next__))
    written(s, "t", s.add_partitions(10, "t", o.producer_id, o.producer_epoch, [("x", 0)]))
    assert s.timed_out(1_000) == [] and s.next_timeout() == 1_010
    assert s.timed_out(1_011) == ["t"]
    abort = s.abort_timed_out(1_011, "t")
    assert abort is not None and abort.write is not None
    assert abort.write.state is S.PREPARE_ABORT and abort.write.producer_epoch == o.producer_epoch + 1
    written(s, "t", abort)
    assert [m.transactional_id for m in s.preparing()] == ["t"]  # a load would write its markers


def test_idle_ids_expire_but_not_open_or_pending_ones() -> None:
    s = TransactionCoordinatorShard(TxnConfig(max_timeout_ms=60_000, id_expiration_ms=1_000))
    ids = itertools.count(1000)
    idle = written(s, "idle", s.init_producer_id(0, "idle", 10_000, -1, -1, ids.__next__))
    o = written(s, "open", s.init_producer_id(0, "open", 10_000, -1, -1, ids.__next__))
    written(s, "open", s.add_partitions(5, "open", o.producer_id, o.producer_epoch, [("x", 0)]))
    assert s.expired_ids(1_000) == ["idle"]  # last update at 0: 1000 ms ago
    assert s.expired_ids(999) == []
    assert s.expired_ids(100_000) == ["idle"]  # Ongoing: never, whatever its age
    assert s.begin_expire(1_000, "idle") and not s.begin_expire(1_000, "open")
    assert s.init_producer_id(1_000, "idle", 10_000, -1, -1, ids.__next__).error is E.concurrent_transactions
    assert s.expired_ids(100_000) == []  # the tombstone is in flight
    s.apply("idle", None)  # the tombstone written: forgotten, and a new InitProducerId starts afresh
    fresh = s.init_producer_id(1_001, "idle", 10_000, -1, -1, ids.__next__)
    assert fresh.producer_id != idle.producer_id and fresh.producer_epoch == 0
