"""TransactionCoordinatorShard: the transaction coordinator as a pure state machine.

Each operation takes the time and returns a ``TxnOutcome``: the answer for the client and, when
the state changes, the new __transaction_state value to write. The runtime writes it, then calls
``apply`` (the same path as replaying the log at load) and answers; while a write is in flight the
transactional id is *pending* and other requests for it get CONCURRENT_TRANSACTIONS, as in Kafka.
A value in PrepareCommit/PrepareAbort tells the runtime to write the markers; once they are all
written ``complete`` gives the CompleteCommit/CompleteAbort value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from strom.coordinator.txn_records import TxnLogValue, TxnState
from strom.protocol.errors import ErrorCode as E

S = TxnState
MAX_EPOCH = 32767 - 1  # an epoch of Short.MaxValue - 1 is the last usable one; then a new producer id
NO_PRODUCER_ID = -1


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    last_producer_epoch: int = -1  # the epoch before the last bump: a retried InitProducerId (KIP-360)

    def value(self, **changes: Any) -> TxnLogValue:
        v = TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms)
        return replace(v, **changes)


@dataclass(frozen=True, slots=True)
class TxnOutcome:
    error: E = E.none
    write: TxnLogValue | None = None  # the new state to write before answering
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1


def failed(error: E) -> TxnOutcome:
    return TxnOutcome(error)


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


class TransactionCoordinatorShard:
    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()

    # ------------------------------------------------------------------ the log

    def apply(self, transactional_id: str, value: TxnLogValue | None) -> None:
        """A value written (or read at load): it becomes the transactional id's state."""
        self.pending.discard(transactional_id)
        if value is None or value.state is S.DEAD:
            self.txns.pop(transactional_id, None)
            return
        old = self.txns.get(transactional_id)
        last_epoch = old.last_producer_epoch if old is not None else -1
        if old is not None and (old.producer_id, old.producer_epoch) != (value.producer_id, value.producer_epoch):
            last_epoch = old.producer_epoch if old.producer_id == value.producer_id else -1
        self.txns[transactional_id] = TxnMetadata(
            transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state,
            set(value.partitions), value.last_update_ms, value.start_ms, last_epoch)

    def write_failed(self, transactional_id: str) -> None:
        self.pending.discard(transactional_id)

    def _begin(self, meta: TxnMetadata, value: TxnLogValue, error: E = E.none) -> TxnOutcome:
        self.pending.add(meta.transactional_id)
        return TxnOutcome(error, value, value.producer_id, value.producer_epoch)

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, now: int, transactional_id: str, timeout_ms: int, expected_pid: int,
                         expected_epoch: int, allocate: Callable[[], int]) -> TxnOutcome:
        if not transactional_id:
            return failed(E.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return failed(E.invalid_transaction_timeout)
        if transactional_id in self.pending:  # (a brand-new id too: its first write is in flight)
            return failed(E.concurrent_transactions)
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, allocate(), -1, timeout_ms, S.EMPTY)
            value = meta.value(producer_epoch=0, state=S.EMPTY, partitions=(), last_update_ms=now, start_ms=-1)
            return self._begin(meta, value)
        if expected_pid >= 0:
            # KIP-360: the producer says which id/epoch it had; a retry of a bump gets the same answer.
            if expected_pid != meta.producer_id:
                return failed(E.producer_fenced)
            if expected_epoch == meta.last_producer_epoch and meta.state in (S.EMPTY, S.COMPLETE_COMMIT,
                                                                              S.COMPLETE_ABORT):
                return TxnOutcome(E.none, None, meta.producer_id, meta.producer_epoch)
            if expected_epoch != meta.producer_epoch:
                return failed(E.producer_fenced)
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, S.DEAD):
            return failed(E.concurrent_transactions)
        if meta.state is S.ONGOING:
            # A new instance of the producer: fence the old one (epoch bump) and abort its transaction;
            # the client retries until the abort is complete.
            pid, epoch = self._bumped(meta, allocate, keep_id=True)
            return self._begin(meta, meta.value(producer_epoch=epoch, state=S.PREPARE_ABORT, last_update_ms=now),
                               E.concurrent_transactions)
        pid, epoch = self._bumped(meta, allocate)
        return self._begin(meta, meta.value(producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                                            state=S.EMPTY, partitions=(), last_update_ms=now, start_ms=-1))

    @staticmethod
    def _bumped(meta: TxnMetadata, allocate: Callable[[], int], keep_id: bool = False) -> tuple[int, int]:
        if meta.producer_epoch < MAX_EPOCH or keep_id:
            return meta.producer_id, min(meta.producer_epoch + 1, MAX_EPOCH + 1)
        return allocate(), 0

    # ------------------------------------------------------------------ adding partitions

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata | E:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if epoch != meta.producer_epoch:
            return E.producer_fenced
        if transactional_id in self.pending or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                                              S.PREPARE_EPOCH_FENCE):
            return E.concurrent_transactions
        return meta

    def add_partitions(self, now: int, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> TxnOutcome:
        meta = self._check_producer(transactional_id, producer_id, epoch)
        if isinstance(meta, E):
            return failed(meta)
        wanted = set(partitions)
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return TxnOutcome(E.none, None, meta.producer_id, meta.producer_epoch)
        start = meta.start_ms if meta.state is S.ONGOING else now
        merged = meta.partitions | wanted if meta.state is S.ONGOING else wanted
        return self._begin(meta, meta.value(state=S.ONGOING, partitions=tuple(sorted(merged)), last_update_ms=now,
                                            start_ms=start))

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], E]:
        """AddPartitionsToTxn v4+ verify_only: is each partition in the ongoing transaction?"""
        meta = self.txns.get(transactional_id)
        ok = meta is not None and meta.producer_id == producer_id and meta.producer_epoch == epoch \
            and meta.state is S.ONGOING
        return {tp: E.none if ok and meta is not None and tp in meta.partitions else E.invalid_txn_state
                for tp in partitions}

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, now: int, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> TxnOutcome:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return failed(E.invalid_producer_id_mapping)
        if epoch != meta.producer_epoch:
            return failed(E.producer_fenced)
        if transactional_id in self.pending:
            return failed(E.concurrent_transactions)
        state = meta.state
        if state is S.ONGOING:
            return self._begin(meta, meta.value(state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                                                last_update_ms=now))
        done, preparing = (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        if state is done:
            return TxnOutcome(E.none, None, meta.producer_id, meta.producer_epoch)  # a retry
        if state is preparing:
            return failed(E.concurrent_transactions)
        return failed(E.invalid_txn_state)

    def complete(self, now: int, transactional_id: str) -> TxnOutcome | None:
        """Every marker is written: the CompleteCommit/CompleteAbort value (None if nothing to do)."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return None
        state = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.pending.add(transactional_id)
        return TxnOutcome(E.none, meta.value(state=state, partitions=(), last_update_ms=now))

    # ------------------------------------------------------------------ timeouts

    def timed_out(self, now: int) -> list[str]:
        """Ongoing transactions older than their timeout (and not being changed right now)."""
        return [t for t, m in self.txns.items()
                if m.state is S.ONGOING and t not in self.pending and m.start_ms + m.timeout_ms < now]

    def abort_timed_out(self, now: int, transactional_id: str) -> TxnOutcome | None:
        """Fence the producer (epoch bump) and abort, as Kafka's abortTimedOutTransactions does."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is not S.ONGOING or transactional_id in self.pending:
            return None
        epoch = min(meta.producer_epoch + 1, MAX_EPOCH + 1)
        return self._begin(meta, meta.value(producer_epoch=epoch, state=S.PREPARE_ABORT, last_update_ms=now))

    def next_timeout(self) -> int | None:
        times = [m.start_ms + m.timeout_ms for m in self.txns.values() if m.state is S.ONGOING]
        return min(times) if times else None

    # ------------------------------------------------------------------ expiration

    def expired_ids(self, now: int) -> list[str]:
        """Kafka's removeExpiredTransactionalIds: ids at rest (Empty, CompleteCommit, CompleteAbort)
        whose last update is older than transactional.id.expiration.ms. An ongoing or preparing
        transaction is never expired: its id still has a decision to carry out."""
        return [t for t, m in self.txns.items() if self._expired(now, m)]

    def _expired(self, now: int, meta: TxnMetadata) -> bool:
        return (meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and meta.transactional_id not in self.pending
                and meta.last_update_ms <= now - self.config.id_expiration_ms)

    def begin_expire(self, now: int, transactional_id: str) -> bool:
        """Mark an expired id pending while its tombstone is written (requests for it meanwhile get
        CONCURRENT_TRANSACTIONS); False if it is no longer expired."""
        meta = self.txns.get(transactional_id)
        if meta is None or not self._expired(now, meta):
            return False
        self.pending.add(transactional_id)
        return True

    # ------------------------------------------------------------------ loading

    def preparing(self) -> list[TxnMetadata]:
        """Transactions whose markers are (still) to be written: after a load, or a failed attempt."""
        return [m for m in self.txns.values() if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]

    def drop(self, keep: Callable[[str], bool]) -> list[str]:
        """Forget the transactional ids ``keep`` refuses (their partition moved away)."""
        doomed = [t for t in self.txns if not keep(t)]
        for t in doomed:
            del self.txns[t]
            self.pending.discard(t)
        return doomed
