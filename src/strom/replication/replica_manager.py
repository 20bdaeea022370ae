"""ReplicaManager: which partitions this broker leads or follows, and the leader's side of every
write (Kafka's ReplicaManager and Partition.appendRecordsToLeader).

It acts on the partition states the cluster holds (``ReplicaStates``: ZooKeeper's, whose watches
bring every change, or for a broker on its own cluster.one_node's, where every partition is led
here at epoch 0 with an ISR of one). A state naming this broker leader makes it the leader at that
epoch (the epoch enters the leader epoch cache at the log end); any other state makes it a follower
of the named leader, fetching through one ReplicaFetcher per leader.

Handlers make one call down for a write (``append_records``): the min.insync.replicas check, the
append, the high watermark step, the wake-up of waiting fetches, the group commit and, for
acks=all, the wait for the ISR happen here, and the call completes with each partition's result.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from strom.clock import now_ms
from strom.cluster.zk_layout import PartitionState
from strom.protocol.errors import ErrorCode as E
from strom.replication.fetcher import ReplicaFetcher
from strom.replication.leader_append import (
    AppendOrigin,
    append_client_batches,
    append_own_batches,
    group_commit,
    partition_result,
)
from strom.replication.partition import FollowerSession, Partition

if TYPE_CHECKING:
    from pathlib import Path

    from strom.cluster.metadata import ClusterEvent, TopicInfo
    from strom.cluster.zk_layout import BrokerRegistration, TopicAssignment
    from strom.config import BrokerConfig
    from strom.records.batch import BatchHeader
    from strom.replication.purgatory import Purgatory
    from strom.security.client import ClientSecurity
    from strom.storage.log import LogConfig, PartitionLog
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.replication")

TopicPartition = tuple[str, int]
T = TypeVar("T")
# (partition, index in the request, records): what append_records writes.
AppendEntry = tuple[str, int, "bytes | bytearray | memoryview | None"]


# New partitions whose logs are made in one go (in a thread), then taken up together.
_MAKE_LOGS_CHUNK = 500
# Directories of a deleted topic removed per thread job: a broker stopping meanwhile waits for one
# chunk, not for the whole topic (the rest, renamed "-delete", go at its next start).
_REMOVE_DIRS_CHUNK = 200


def fetcher_index(topic: str, partition: int, fetchers: int) -> int:
    """Which of a leader's ``fetchers`` copies this partition: stable across restarts (crc32, not
    Python's salted hash) so a partition keeps its fetcher."""
    return (zlib.crc32(topic.encode()) * 31 + partition) % fetchers


class ReplicaStates(Protocol):
    """The cluster's view of partitions that the replica manager acts on: the ZooKeeper store in a
    cluster, cluster.one_node.OneNodeStates for a broker on its own."""

    @property
    def assignments(self) -> Mapping[str, TopicAssignment]: ...
    @property
    def brokers(self) -> Mapping[int, BrokerRegistration | None]: ...  # registered (live) brokers
    @property
    def shutting_down(self) -> Container[int]: ...  # brokers in a controlled shutdown
    @property
    def listeners(self) -> list[Callable[[ClusterEvent], None]]: ...
    def get_topic(self, name: str) -> TopicInfo | None: ...
    def state(self, topic: str, partition: int) -> PartitionState | None: ...
    def update_isrs(self, changes: list[tuple[str, int, PartitionState]]) -> list[PartitionState | None]: ...
    async def run(self, fn: Callable[..., T], *args: Any) -> T: ...


class ReplicaManager:
    def __init__(self, broker_id: int, store: ReplicaStates, logs: LogManager, purgatory: Purgatory, *,
                 config: Callable[[], BrokerConfig], spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
                 inter_broker_security: ClientSecurity, topic_log_config: Callable[[TopicInfo], LogConfig],
                 on_topic_config: Callable[[str], None],
                 on_client_append: Callable[[str, int, list[BatchHeader]], None]) -> None:
        """``config`` returns the broker's current config; ``topic_log_config`` a topic's log
        config; ``on_topic_config`` applies a topic's changed configs; ``on_client_append`` counts
        what clients wrote (topic, bytes, batches)."""
        self.broker_id = broker_id
        self.store = store
        self.logs = logs
        self.purgatory = purgatory
        self._config = config
        self._spawn = spawn
        self.inter_broker_security = inter_broker_security
        self._topic_log_config = topic_log_config
        self._on_topic_config = on_topic_config
        self._on_client_append = on_client_append
        self.partitions: dict[TopicPartition, Partition] = {}
        # (leader broker, fetcher index): num.replica.fetchers per leader, partitions spread by hash.
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._shrink_task: asyncio.Task[Any] | None = None
        # Told (topic, partition, leader epoch) on becoming a partition's leader, and with epoch -1
        # on ceasing to be it: the coordinators load and drop their state with it.
        self.leadership_listeners: list[Callable[[str, int, int], None]] = []
        # Partitions whose logs are being made, by topic (topic id, partitions): a new topic's
        # states arrive together, and their logs are made together in a thread (see _make_logs).
        self._to_create: dict[str, tuple[Any, set[int]]] = {}
        self._creating: set[TopicPartition] = set()
        self._create_task: asyncio.Task[Any] | None = None
        # Changes are acted on once start() has taken up what the cache held: before that the
        # logs on disk are not loaded yet.
        self._started = False
        # ISR changes waiting for the write in flight (partition, proposed state, why, ISR before).
        self._isr_queue: list[tuple[Partition, PartitionState, str, tuple[int, ...]]] = []
        self._isr_task: asyncio.Task[Any] | None = None
        self._changes: dict[str, int] | None = None  # see _log_change
        store.listeners.append(self._on_event)

    # ---- what fetchers use (replication.fetcher.FetcherHost) ---------------------------------------

    @property
    def config(self) -> BrokerConfig:
        return self._config()

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self.store.brokers.get(broker_id)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        return self._spawn(coro)

    # ---- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Take up every partition the cache assigns to this broker (the logs loaded); later
        changes are taken up as they come."""
        self._started = True
        for topic, assignment in list(self.store.assignments.items()):
            self._apply_topic(topic, assignment)
        self._shrink_task = self.spawn(self._isr_shrink_loop())

    async def stop(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        if self._shrink_task is not None:
            self._shrink_task.cancel()

    # ---- state changes ---------------------------------------------------------------------------

    def _on_event(self, event: ClusterEvent) -> None:
        if not self._started:
            return
        if event.kind == "state" and event.topic is not None and event.partition is not None:
            self._apply(event.topic, event.partition)
        elif event.kind == "topic" and event.topic is not None:
            assignment = self.store.assignments.get(event.topic)
            if assignment is None:
                self._topic_gone(event.topic)
            else:
                self._apply_topic(event.topic, assignment)
        elif event.kind == "topic_config" and event.topic is not None:
            self._on_topic_config(event.topic)

    def _apply_topic(self, topic: str, assignment: TopicAssignment) -> None:
        """Every partition of one topic, the assignment read once (a one-node store computes it
        per read: reading it per partition made a topic's start quadratic). The per-partition
        leadership lines go to debug, and one line counts them."""
        self._changes = {}
        try:
            for p in assignment.replicas:
                self._apply(topic, p, assignment)
        finally:
            changes, self._changes = self._changes, None
        for what, count in sorted(changes.items()):
            log.info("%s: %d partitions %s", topic, count, what)

    def _apply(self, topic: str, p: int, assignment: TopicAssignment | None = None) -> None:
        store = self.store
        if assignment is None:
            assignment = store.assignments.get(topic)
        state = store.state(topic, p)
        if assignment is None or state is None:
            return
        replicas = assignment.replicas.get(p, [])
        key = (topic, p)
        if key in self._creating:
            return  # applied once its log is made, with the state current then
        part = self.partitions.get(key)
        if self.broker_id not in replicas:
            if part is not None:
                # Reassigned away: stop, and delete this replica (Kafka's StopReplica with delete).
                self._stop_following(part)
                del self.partitions[key]
                if part.is_leader:
                    self._tell_leadership(part, -1)
                self._delete_replica(topic, p)
            return
        if part is None:
            if self.logs.get_log(topic, p) is None:
                self._make_log_later(topic, p, assignment.topic_id)
                return
            plog = self._log_for(topic, p, assignment.topic_id)
            part = Partition(topic, p, plog, list(replicas), PartitionState(-2, -1, (), -1), self.broker_id)
            self.partitions[key] = part
        part.replicas = list(replicas)
        old = part.state
        if state.leader == self.broker_id:
            if old.leader != self.broker_id or old.leader_epoch != state.leader_epoch:
                self._become_leader(part, state)
            else:
                part.state = state  # an ISR change at the same epoch
                self._after_hw_inputs_changed(part)
        else:
            was = (old.leader, old.leader_epoch)
            part.state = state
            if was != (state.leader, state.leader_epoch):
                if old.leader == self.broker_id:
                    self._tell_leadership(part, -1)
                self._become_follower(part, state)
        self.purgatory.notify(key)  # waiting acks and fetches look again

    def _make_log_later(self, topic: str, p: int, topic_id: Any) -> None:
        entry = self._to_create.get(topic)
        if entry is None or entry[0] != topic_id:
            entry = self._to_create[topic] = (topic_id, set())
        entry[1].add(p)
        self._creating.add((topic, p))
        if self._create_task is None or self._create_task.done():
            self._create_task = self.spawn(self._make_logs())

    async def _make_logs(self) -> None:
        """Make the logs of the partitions that came here, a topic's at a time, with the file work
        (directories, fsyncs) in a thread and not one partition per loop turn: the thousand
        partitions of a new topic take a second, not the loop's attention for many. Each partition
        is then applied with its state as the cache has it by then."""
        lm = self.logs
        loop = asyncio.get_running_loop()
        while self._to_create:
            topic, (topic_id, waiting) = next(iter(self._to_create.items()))
            # The partitions led here first, in chunks: a leader serves (and Metadata names it) as
            # soon as its log is made, while the followers' logs are still being made.
            led = sorted(p for p in waiting if (s := self.store.state(topic, p)) is not None and s.leader == self.broker_id)
            parts = set((led or sorted(waiting))[:_MAKE_LOGS_CHUNK])
            waiting -= parts
            if not waiting:
                del self._to_create[topic]
            info = self.store.get_topic(topic)
            cfg = self._topic_log_config(info) if info is not None else None
            made = False
            try:
                new = lm.prepare_logs(topic, sorted(p for p in parts if lm.get_log(topic, p) is None), topic_id, cfg)
                try:
                    await loop.run_in_executor(None, lm.make_logs, new)
                except BaseException:
                    lm.cancel_logs(new)
                    raise
                logs = lm.add_logs(new)
                made = True
                # The topic's configs may have come while the files were made (their own watch):
                # the new logs take them as they are now.
                info = self.store.get_topic(topic)
                if info is not None:
                    cfg = self._topic_log_config(info)
                    for plog in logs:
                        plog.config = cfg
            except Exception:
                log.exception("could not make the logs of %d partitions of %s", len(parts), topic)
            finally:
                for p in parts:
                    self._creating.discard((topic, p))
            assignment = self.store.assignments.get(topic)
            if assignment is None or assignment.topic_id != topic_id:
                rest = self._to_create.get(topic)
                if rest is not None and rest[0] == topic_id:
                    del self._to_create[topic]
                    self._creating.difference_update((topic, p) for p in rest[1])
                self._topic_gone(topic)  # deleted meanwhile: its new logs go too
                continue
            if made:
                for p in sorted(parts):
                    self._apply(topic, p)

    def _log_for(self, topic: str, p: int, topic_id: Any) -> PartitionLog:
        lm = self.logs
        plog = lm.get_log(topic, p)
        info = self.store.get_topic(topic)
        if plog is None:
            cfg = self._topic_log_config(info) if info is not None else None
            plog = lm.create_logs(topic, [p], topic_id, cfg)[0]
            if cfg is not None:
                plog.config = cfg
        if not plog.replicated:
            plog.replicated = True
            # The high watermark survives restarts in replication-offset-checkpoint, never past the log end.
            hw = lm.high_watermark_checkpoints.get((topic, p), 0)
            plog.high_watermark = max(min(hw, plog.log_end_offset), plog.log_start_offset)
        return plog

    def _become_leader(self, part: Partition, state: PartitionState) -> None:
        self._stop_following(part)
        part.become_leader(state, now_ms())
        cache = part.log.leader_epoch_cache
        if state.leader_epoch > cache.latest_epoch:  # no record in it yet: the file waits for one
            cache.assign(state.leader_epoch, part.log.log_end_offset, defer=True)
        self._log_change(f"led at epoch {state.leader_epoch}", "%s-%d: leader at epoch %d (log end %d, hw %d, isr %s)",
                         part.topic, part.partition, state.leader_epoch, part.log.log_end_offset,
                         part.log.high_watermark, list(state.isr))
        self._after_hw_inputs_changed(part)
        self._tell_leadership(part, state.leader_epoch)

    def _tell_leadership(self, part: Partition, leader_epoch: int) -> None:
        for listener in list(self.leadership_listeners):
            try:
                listener(part.topic, part.partition, leader_epoch)
            except Exception:
                log.exception("leadership listener failed for %s-%d", part.topic, part.partition)

    def _become_follower(self, part: Partition, state: PartitionState) -> None:
        self._stop_following(part)
        part.followers = {}
        if state.leader < 0:
            log.info("%s-%d: offline (no leader) at epoch %d", part.topic, part.partition, state.leader_epoch)
            return
        key = (state.leader, fetcher_index(part.topic, part.partition, self.config.num_replica_fetchers))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, *key)
            fetcher.start()
        fetcher.add(part)
        self._log_change(f"followed (leader {state.leader}, epoch {state.leader_epoch})",
                         "%s-%d: follower of %d at epoch %d", part.topic, part.partition, state.leader,
                         state.leader_epoch)

    def _log_change(self, summary: str, msg: str, *args: Any) -> None:
        """A leadership change: logged on its own, or counted under ``summary`` while a whole topic
        is applied (then the line is debug: thousands of lines cost the start seconds)."""
        if self._changes is None:
            log.info(msg, *args)
            return
        self._changes[summary] = self._changes.get(summary, 0) + 1
        log.debug(msg, *args)

    def _stop_following(self, part: Partition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(part.key)

    def _delete_replica(self, topic: str, p: int) -> None:
        lm = self.logs
        if lm.get_log(topic, p) is None:
            return
        path = lm.delete_partition(topic, p)
        self.spawn(asyncio.get_running_loop().run_in_executor(None, lm.remove_dirs, [path]))
        log.info("%s-%d: replica removed from this broker", topic, p)

    def _topic_gone(self, topic: str) -> None:
        doomed = [k for k in self.partitions if k[0] == topic]
        for key in doomed:
            part = self.partitions.pop(key)
            self._stop_following(part)
            if part.is_leader:
                self._tell_leadership(part, -1)
            self.purgatory.notify(key)
        lm = self.logs
        if any(plog.topic == topic for plog in lm.all_logs()):
            paths = lm.schedule_delete(topic)
            self.spawn(self._remove_dirs(paths))
            log.info("deleted the logs of topic %s", topic)

    async def _remove_dirs(self, paths: list[Path]) -> None:
        """The directories of deleted logs, removed in a thread a chunk at a time."""
        loop = asyncio.get_running_loop()
        for i in range(0, len(paths), _REMOVE_DIRS_CHUNK):
            await loop.run_in_executor(None, self.logs.remove_dirs, paths[i:i + _REMOVE_DIRS_CHUNK])

    # ---- for handlers ----------------------------------------------------------------------------

    def taking_up(self, topic: str, p: int) -> bool:
        """Whether this partition came here and its log is still being made."""
        return (topic, p) in self._creating

    def leader_partition(self, topic: str, p: int, current_leader_epoch: int = -1) -> tuple[Partition | None, int]:
        """The partition if this broker leads it (at ``current_leader_epoch`` when given), else
        None and Kafka's error: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH (the client's epoch is older) or UNKNOWN_LEADER_EPOCH (newer)."""
        part = self.partitions.get((topic, p))
        if part is None:
            assignment = self.store.assignments.get(topic)
            if assignment is None or p not in assignment.replicas:
                return None, E.unknown_topic_or_partition
            return None, E.not_leader_or_follower
        if not part.is_leader:
            return None, E.not_leader_or_follower
        if current_leader_epoch >= 0:
            if current_leader_epoch < part.leader_epoch:
                return None, E.fenced_leader_epoch
            if current_leader_epoch > part.leader_epoch:
                return None, E.unknown_leader_epoch
        return part, E.none

    def leader_log(self, topic: str, p: int, current_leader_epoch: int = -1) -> tuple[PartitionLog | None, int, int]:
        """(log, error, leader epoch) of a partition this broker leads; (None, Kafka's error, -1)
        when it does not (see ``leader_partition``)."""
        part, error = self.leader_partition(topic, p, current_leader_epoch)
        return (part.log, E.none, part.leader_epoch) if part is not None else (None, error, -1)

    def append_records(self, acks: int, timeout_s: float, entries: Sequence[AppendEntry],
                       origin: AppendOrigin = AppendOrigin.CLIENT
                       ) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]:
        """Write each entry (topic, partition, batches) as its leader; each partition's Produce
        response entry, in order. The results come at once when nothing must be waited for, else
        as an awaitable: the fsync of log.flush.interval.messages (every partition of the call in
        one go: group commit) and, for acks=all, the ISR (records below the high watermark).

        acks=all needs min.insync.replicas in the ISR before the append (NOT_ENOUGH_REPLICAS) and
        after it (NOT_ENOUGH_REPLICAS_AFTER_APPEND), as in Kafka; on one broker too. A
        coordinator's own writes skip that check: they wait for the ISR they have."""
        results: list[dict[str, Any]] = []
        to_flush: list[PartitionLog] = []
        waits: list[tuple[Partition, int, dict[str, Any]]] = []
        failed: list[str] = []
        client = origin is AppendOrigin.CLIENT
        for topic, index, records in entries:
            part, error = self.leader_partition(topic, index)
            if part is None:
                results.append(partition_result(index, error))
                continue
            plog = part.log
            if acks == -1 and client and len(part.state.isr) < plog.config.min_insync_replicas:
                results.append(partition_result(
                    index, E.not_enough_replicas,
                    message=f"ISR {list(part.state.isr)} is smaller than min.insync.replicas="
                            f"{plog.config.min_insync_replicas}"))
                continue
            if part.followers:
                part.before_append()
            try:
                if client:
                    result, headers = append_client_batches(plog, index, records, part.state.leader_epoch)
                else:
                    assert records is not None
                    result, headers = append_own_batches(plog, index, records, part.state.leader_epoch)
            except OSError as e:
                # The file system refused (no space, too many open files): the log is as it was
                # (a failed write is cut back), this partition is answered, the others go on.
                failed.append(f"{topic}-{index}")
                results.append(partition_result(index, E.kafka_storage_error,
                                                message=f"Could not write to the log: {e.strerror or e}"))
                if len(failed) == 1:
                    log.error("could not append to %s-%d: %s", topic, index, e)
                continue
            results.append(result)
            if result["error_code"] != E.none:
                continue
            if headers:  # appended (a retried batch the log already has is answered, not written)
                if client:
                    self._on_client_append(topic, len(records) if records is not None else 0, headers)
                if len(part.state.isr) <= 1:
                    part.maybe_advance_high_watermark()  # no other replica to wait for: committed now
                self.purgatory.notify(part.key)
            if plog.needs_flush():
                to_flush.append(plog)
            if acks == -1:
                # A retried batch waits like a new one: its first answer may have been lost before
                # the ISR had it (say, on a leader cut off from its followers).
                waits.append((part, plog.log_end_offset, result))
        if len(failed) > 1:
            log.error("could not append to %d partitions (the first above): %s", len(failed), ", ".join(failed[:10]))
        if not to_flush and not waits:
            return results
        return self._complete(results, to_flush, waits, timeout_s, client)

    async def _complete(self, results: list[dict[str, Any]], logs: list[PartitionLog],
                        waits: list[tuple[Partition, int, dict[str, Any]]], timeout_s: float,
                        check_min_isr: bool) -> list[dict[str, Any]]:
        if logs:
            await group_commit(logs)
        if waits:
            await self._wait_for_acks(waits, timeout_s, check_min_isr)
        return results

    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int = -1,
                         session: FollowerSession | None = None) -> None:
        """A follower fetched from ``fetch_offset``: its log reaches there. Only a fetch brings a
        follower back into the ISR (as in Kafka): what a dead broker fetched last never does, and
        neither does a broker in a controlled shutdown (the controller just took it out). With a
        fetch ``session`` its later fetches that leave the partition out count as fetches of it."""
        if part.update_follower(replica_id, fetch_offset, now_ms(), log_start_offset, session):
            self.purgatory.notify(part.key)  # a DeleteRecords may wait for this follower
        self._after_hw_inputs_changed(part)
        if part.can_join_isr(replica_id) and replica_id in self.store.brokers \
                and replica_id not in self.store.shutting_down:
            self._change_isr(part, (*part.isr, replica_id), "expand")

    def _after_hw_inputs_changed(self, part: Partition) -> None:
        if part.maybe_advance_high_watermark():
            self.purgatory.notify(part.key)

    def _change_isr(self, part: Partition, isr: tuple[int, ...], why: str) -> None:
        """Write the new ISR to ZooKeeper (compare-and-set); it takes effect once written. The
        changes proposed while a write is out go together in the next one (a restarted broker
        rejoins thousands of ISRs: a few ZooKeeper transactions, not a round trip each)."""
        if part.isr_change_in_flight:
            return
        part.isr_change_in_flight = True
        proposed = PartitionState(part.state.leader, part.state.leader_epoch, isr, part.state.controller_epoch,
                                  part.state.zk_version)
        self._isr_queue.append((part, proposed, why, part.state.isr))
        if self._isr_task is None or self._isr_task.done():
            self._isr_task = self.spawn(self._write_isrs())

    async def _write_isrs(self) -> None:
        while self._isr_queue:
            batch, self._isr_queue = self._isr_queue, []
            try:
                written_all = await self.store.run(self.store.update_isrs,
                                                   [(part.topic, part.partition, new) for part, new, _, _ in batch])
            except Exception as e:  # ZooKeeper unreachable: the ISRs stay as they are
                first, proposed, why, _ = batch[0]
                log.warning("%s-%d: could not %s the ISR to %s: %s%s", first.topic, first.partition, why,
                            list(proposed.isr), e, f" (nor {len(batch) - 1} more ISR changes)" if len(batch) > 1 else "")
                written_all = [None] * len(batch)
            for (part, proposed, why, before), written in zip(batch, written_all, strict=True):
                part.isr_change_in_flight = False
                current = self.partitions.get(part.key)
                if written is None or current is not part or not part.is_leader \
                        or part.leader_epoch != written.leader_epoch:
                    continue
                log.info("%s-%d: ISR %s -> %s (%s)", part.topic, part.partition, list(before), list(proposed.isr), why)
                if why == "shrink":
                    self.isr_shrinks += 1
                else:
                    self.isr_expands += 1
                part.state = written
                self._after_hw_inputs_changed(part)
                self.purgatory.notify(part.key)

    async def _isr_shrink_loop(self) -> None:
        lag_max = self.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(max(lag_max / 2000, 0.05))
            now = now_ms()
            for part in list(self.partitions.values()):
                if not part.is_leader:
                    continue
                out = part.isr_to_shrink(now, lag_max)
                if out:
                    self._change_isr(part, tuple(b for b in part.isr if b not in out), "shrink")

    async def _wait_for_acks(self, waits: list[tuple[Partition, int, dict[str, Any]]], timeout_s: float,
                             check_min_isr: bool) -> None:
        """acks=all: each partition's result waits until its high watermark passes ``end`` (the
        whole ISR has the records). Fills in the error when leadership moves, the ISR fell below
        min.insync.replicas (when ``check_min_isr``), or the time runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = list(waits)
        while pending:
            still = []
            for part, end, result in pending:
                current = self.partitions.get(part.key)
                if current is not part or not part.is_leader:
                    result["error_code"] = E.not_leader_or_follower
                elif part.log.high_watermark >= end:
                    if check_min_isr and len(part.isr) < part.log.config.min_insync_replicas:
                        result["error_code"] = E.not_enough_replicas_after_append
                else:
                    still.append((part, end, result))
            pending = still
            remaining = deadline - loop.time()
            if not pending:
                return
            if remaining <= 0:
                for _, _, result in pending:
                    result["error_code"] = E.request_timed_out
                return
            await self.purgatory.wait([p.key for p, _, _ in pending], remaining)

    async def wait_for_low_watermark(self, part: Partition, offset: int, timeout_s: float) -> tuple[int, int]:
        """DeleteRecords on the leader: wait until every replica on a live broker has moved its log
        start to ``offset`` (followers learn it from their next fetch). Returns (error, low watermark)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if self.partitions.get(part.key) is not part or not part.is_leader:
                return E.not_leader_or_follower, -1
            low = part.low_watermark(self.store.brokers)
            if low >= offset:
                return E.none, low
            remaining = deadline - loop.time()
            if remaining <= 0:
                return E.request_timed_out, low
            await self.purgatory.wait([part.key], remaining)

    # ---- views -----------------------------------------------------------------------------------

    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader and len(p.isr) < len(p.replicas))

    def led(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader)
