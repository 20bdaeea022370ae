"""TransactionCoordinatorRuntime: runs the pure transaction shard against __transaction_state,
written through the ``PartitionWriter`` the broker provides (strom.coordinator.partition_writer).

Like the group coordinator's runtime: a partition of __transaction_state is replayed when this
broker becomes its leader (every partition at start on a single broker) and its transactional ids
are dropped when the leadership moves. Each state change is written to the partition of its
transactional id and waits for the ISR before it takes effect and the client is answered. After
PrepareCommit/PrepareAbort the markers go to every partition of the transaction (through the
``write_markers`` callable the broker provides: locally or by WriteTxnMarkers), retried until all
are written, then CompleteCommit/CompleteAbort is written. A transaction found in a Prepare state
at load has its markers written again, so a crash in the middle of a commit completes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from strom.clock import now_ms
from strom.coordinator import records as rec
from strom.coordinator import txn_records as trec
from strom.coordinator.config import TRANSACTION_STATE_TOPIC_NAME, TxnRuntimeConfig
from strom.coordinator.partition_writer import LogReader, PartitionWriter
from strom.coordinator.placement import Placement, replay_partition, replication_error
from strom.coordinator.txn_records import TxnLogValue, TxnState
from strom.coordinator.txn_shard import TransactionCoordinatorShard, TxnOutcome
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec

log = logging.getLogger("strom.transactions")

__all__ = ["TRANSACTION_STATE_TOPIC_NAME", "TransactionCoordinatorRuntime", "fenced_error", "txn_coordinator_for"]

_MARKER_RETRY_S = 0.2
_HOLD_S = 5.0  # longest a request waits for its id's previous transaction to complete
TopicPartition = tuple[str, int]
# (producer id, epoch, commit, coordinator epoch, partitions) -> error per partition
MarkerWriter = Callable[[int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, E]]]
# A marker that cannot be written because the partition is gone does not hold the transaction up.
_MARKER_DONE = (E.none, E.unknown_topic_or_partition)
_WRITE_TIMEOUT_S = 5.0  # how long a state change waits for the ISR


@dataclass
class _Turn:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class TransactionCoordinatorRuntime:
    def __init__(self, writer: PartitionWriter, config: TxnRuntimeConfig, write_markers: MarkerWriter,
                 allocate_producer_id: Callable[[], int], clock: Callable[[], int] = now_ms) -> None:
        self.writer = writer
        self.clock = clock
        self.write_markers = write_markers
        self.allocate_producer_id = allocate_producer_id
        self.shard = TransactionCoordinatorShard(config.txns)
        self.abort_interval_s = config.abort_timed_out_interval_ms / 1000
        self.expire_interval_s = config.remove_expired_interval_ms / 1000
        self.loaded = False
        # Partitions of __transaction_state loaded here (-> leader epoch: the markers' coordinator epoch).
        self.placement = Placement(config.topic, writer, self._load_owned, self._owned_loaded, self._unload,
                                   self._load_all)
        self._markers: dict[str, asyncio.Task[Any]] = {}
        self._turns: dict[str, _Turn] = {}  # see _turn
        self._ticker: asyncio.Task[Any] | None = None
        self._expirer: asyncio.Task[Any] | None = None
        # Counters for /metrics and the CLI.
        self.commits = self.aborts = self.timeouts = self.expired = 0

    # ------------------------------------------------------------------ placement

    @property
    def num_partitions(self) -> int:
        return self.placement.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return self.placement.partition_for(transactional_id)

    def error_for(self, transactional_id: str) -> E:
        """NONE when this broker coordinates the transactional id now; else what to tell the client."""
        if not self.loaded:
            return E.coordinator_not_available
        return self.placement.error_for(self.partition_for(transactional_id))

    def find_coordinator(self) -> bool:
        """FindCoordinator for a transactional id: like Kafka, when __transaction_state gets
        created. False while it is being created."""
        return self._ensure_topic()

    def _ensure_topic(self) -> bool:
        return self.placement.ensure_topic()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.placement.start()
        self.loaded = True
        self._ticker = self.writer.spawn(self._abort_loop())
        self._expirer = self.writer.spawn(self._expire_loop())

    async def _load_all(self) -> None:
        """This broker leads every partition for good (on its own): all of them, before it serves."""
        count = self.writer.partition_count(TRANSACTION_STATE_TOPIC_NAME)
        for partition in range(count or 0):
            plog = self.writer.local_log(TRANSACTION_STATE_TOPIC_NAME, partition)
            if plog is not None:
                await self._load_partition(plog)
        log.info("transaction coordinator loaded %d transactional ids", len(self.shard.txns))
        self._resume_markers(lambda _t: True)

    async def stop(self) -> None:
        self.loaded = False
        tasks = [t for t in (self._ticker, self._expirer, *self._markers.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._ticker = self._expirer = None
        self._markers.clear()

    async def _load_owned(self, partition: int) -> None:
        plog = self.writer.local_log(TRANSACTION_STATE_TOPIC_NAME, partition)
        try:
            if plog is not None:
                await self._load_partition(plog)
        except Exception:
            self.shard.drop(lambda t: self.partition_for(t) != partition)
            raise

    def _owned_loaded(self, partition: int, leader_epoch: int, _result: None) -> None:
        log.info("transaction coordinator: loaded %s-%d at leader epoch %d", TRANSACTION_STATE_TOPIC_NAME,
                 partition, leader_epoch)
        self._resume_markers(lambda t: self.partition_for(t) == partition)

    def _unload(self, partition: int) -> None:
        for txn_id in self.shard.drop(lambda t: self.partition_for(t) != partition):
            task = self._markers.pop(txn_id, None)
            if task is not None:
                task.cancel()
        log.info("transaction coordinator: unloaded %s-%d", TRANSACTION_STATE_TOPIC_NAME, partition)

    async def _load_partition(self, plog: LogReader) -> None:
        shard = self.shard

        def on_batch(data: bytes, header: rb.BatchHeader, from_offset: int) -> None:
            if header.is_control:
                return
            for record in codec.iter_records(data, header):
                if record.offset < from_offset or record.key is None:
                    continue
                try:
                    txn_id = trec.decode_key(record.key)
                    if txn_id is not None:
                        shard.apply(txn_id, None if record.value is None else trec.decode_value(record.value))
                except rec.RecordFormatError as e:
                    log.warning("skipping unreadable record at %s-%d offset %d: %s", plog.topic, plog.partition,
                                record.offset, e)

        await replay_partition(plog, on_batch)

    def _resume_markers(self, mine: Callable[[str], bool]) -> None:
        for meta in self.shard.preparing():
            if mine(meta.transactional_id):
                log.info("transaction %s was in %s: writing its markers", meta.transactional_id, meta.state.name)
                self._start_markers(meta.transactional_id)

    # ------------------------------------------------------------------ writing state

    async def _write(self, transactional_id: str, outcome: TxnOutcome) -> E:
        """Write the outcome's new state; it takes effect (and Prepare* starts the markers) once the
        ISR has it. Returns the error for the client if the write failed."""
        value = outcome.write
        assert value is not None
        error = await self._append(transactional_id, value)
        if error is not E.none:
            return error
        if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._start_markers(transactional_id)
        elif value.state is TxnState.COMPLETE_COMMIT:
            self.commits += 1
        elif value.state is TxnState.COMPLETE_ABORT:
            self.aborts += 1
        return E.none

    async def _append(self, transactional_id: str, value: TxnLogValue | None) -> E:
        """Write ``value`` (None: a tombstone) for the id and apply it once the ISR has it; on
        failure the id stops being pending and its state is unchanged."""
        partition = self.partition_for(transactional_id)
        encoded = None if value is None else trec.encode_value(value)
        buf = bytearray(codec.build_batch([(trec.encode_key(transactional_id), encoded)],
                                          timestamp_ms=self.clock()))
        try:
            self._ensure_topic()
            [result] = await self.writer.append([(TRANSACTION_STATE_TOPIC_NAME, partition, buf)], _WRITE_TIMEOUT_S)
            error = replication_error([result.error])
        except Exception as e:
            log.error("could not write to %s-%d: %s", TRANSACTION_STATE_TOPIC_NAME, partition, e)
            error = self.placement.write_failed_error()
        if error is not E.none:
            self.shard.write_failed(transactional_id)
            return error
        self.shard.apply(transactional_id, value)
        return E.none

    async def _run(self, transactional_id: str, outcome: TxnOutcome) -> TxnOutcome:
        if outcome.write is None:
            return outcome
        error = await self._write(transactional_id, outcome)
        return outcome if error is E.none else TxnOutcome(error)

    def _start_markers(self, transactional_id: str) -> None:
        if transactional_id not in self._markers:
            self._markers[transactional_id] = self.writer.spawn(self._complete(transactional_id))

    async def _complete(self, transactional_id: str) -> None:
        """Markers to every partition (retried until written), then the Complete state."""
        try:
            done: set[TopicPartition] = set()
            while True:
                meta = self.shard.txns.get(transactional_id)
                if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    return
                todo = sorted(meta.partitions - done)
                if todo:
                    coordinator_epoch = self.placement.owned.get(self.partition_for(transactional_id), 0)
                    results = await self.write_markers(meta.producer_id, meta.producer_epoch,
                                                       meta.state is TxnState.PREPARE_COMMIT, coordinator_epoch, todo)
                    done.update(tp for tp, error in results.items() if error in _MARKER_DONE)
                    if meta.partitions - done:
                        await asyncio.sleep(_MARKER_RETRY_S)
                        continue
                outcome = self.shard.complete(self.clock(), transactional_id)
                if outcome is None:
                    return
                if await self._write(transactional_id, outcome) is E.none:
                    return
                await asyncio.sleep(_MARKER_RETRY_S)
        except Exception:
            log.exception("transaction %s: writing markers failed", transactional_id)
        finally:
            self._markers.pop(transactional_id, None)

    async def _abort_loop(self) -> None:
        """Kafka's abortTimedOutTransactions, every transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        while True:
            await asyncio.sleep(self.abort_interval_s)
            now = self.clock()
            for txn_id in self.shard.timed_out(now):
                if self.error_for(txn_id) is not E.none:
                    continue
                outcome = self.shard.abort_timed_out(now, txn_id)
                if outcome is not None:
                    log.info("transaction %s timed out: aborting it", txn_id)
                    self.timeouts += 1
                    with contextlib.suppress(Exception):
                        await self._write(txn_id, outcome)

    async def _expire_loop(self) -> None:
        """Kafka's removeExpiredTransactionalIds, every
        transaction.remove.expired.transaction.cleanup.interval.ms: an id at rest for longer than
        transactional.id.expiration.ms gets a tombstone in __transaction_state (so a replay forgets
        it too, and compaction drops it) and is forgotten; its next InitProducerId starts afresh."""
        while True:
            await asyncio.sleep(self.expire_interval_s)
            try:
                await self.remove_expired()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("removing expired transactional ids failed")

    async def remove_expired(self) -> int:
        now = self.clock()
        removed = 0
        for txn_id in self.shard.expired_ids(now):
            # Only the leader of the id's partition writes (and its ids are the only ones loaded here).
            if self.error_for(txn_id) is not E.none or not self.shard.begin_expire(now, txn_id):
                continue
            if await self._append(txn_id, None) is E.none:
                removed += 1
                log.info("transactional id %s expired: removed", txn_id)
        self.expired += removed
        return removed

    # ------------------------------------------------------------------ the API for handlers

    @contextlib.asynccontextmanager
    async def _turn(self, transactional_id: str) -> AsyncIterator[None]:
        """Requests for one transactional id, one at a time in the order they came, each once the
        id's previous transaction is complete (its markers written; at most _HOLD_S, after which
        the shard answers CONCURRENT_TRANSACTIONS as Kafka does at once). librdkafka sends
        AddPartitionsToTxn and, without waiting for its answer, EndTxn: were the first refused
        while the last commit's markers are out, an abort right after it would find no
        transaction open and fail the producer for good with INVALID_TXN_STATE."""
        turn = self._turns.get(transactional_id)
        if turn is None:
            turn = self._turns[transactional_id] = _Turn()
        turn.users += 1
        try:
            async with turn.lock:
                task = self._markers.get(transactional_id)
                if task is not None and not task.done():
                    with contextlib.suppress(TimeoutError, Exception):
                        await asyncio.wait_for(asyncio.shield(task), _HOLD_S)
                yield
        finally:
            turn.users -= 1
            if turn.users == 0:
                del self._turns[transactional_id]

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                               producer_epoch: int) -> TxnOutcome:
        async with self._turn(transactional_id):
            outcome = self.shard.init_producer_id(self.clock(), transactional_id, timeout_ms, producer_id,
                                                  producer_epoch, self.allocate_producer_id)
            return await self._run(transactional_id, outcome)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> E:
        async with self._turn(transactional_id):
            outcome = self.shard.add_partitions(self.clock(), transactional_id, producer_id, producer_epoch,
                                                partitions)
            return (await self._run(transactional_id, outcome)).error

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        return self.shard.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> E:
        async with self._turn(transactional_id):
            outcome = self.shard.end_txn(self.clock(), transactional_id, producer_id, producer_epoch, commit)
            return (await self._run(transactional_id, outcome)).error

    def describe(self, transactional_id: str) -> TxnLogValue | None:
        meta = self.shard.txns.get(transactional_id)
        return meta.value() if meta is not None else None


def fenced_error(error: E, version: int, since: int) -> E:
    """PRODUCER_FENCED exists for a request version from ``since`` on (KIP-588); older clients
    know it as INVALID_PRODUCER_EPOCH."""
    return E.invalid_producer_epoch if error is E.producer_fenced and version < since else error


def txn_coordinator_for(broker: Any, transactional_id: str) -> tuple[TransactionCoordinatorRuntime | None, E]:
    """The transaction coordinator if this broker coordinates ``transactional_id`` now, else None
    and the error for the client."""
    runtime: TransactionCoordinatorRuntime | None = getattr(broker, "txn_coordinator", None)
    if runtime is None:
        return None, E.coordinator_not_available
    error = runtime.error_for(transactional_id)
    return (runtime, E.none) if error is E.none else (None, error)
