"""Topic lifecycle on this broker: create, auto-create, add partitions, delete, per-topic log config.

Keeps the cluster metadata (names, ids, partition counts, configs) and the partition logs on disk in
step: a topic's logs are made first and it enters the metadata last, so it is never visible half
made. Runs on the event loop; the file work of CreateTopics and CreatePartitions (directories,
``partition.metadata``, fsyncs: seconds for a thousand partitions) and the removal of deleted data
go to a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from strom.cluster.metadata import LocalMetadataStore, TopicInfo, ZooKeeperUnavailable, validate_topic_name
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.cluster.metadata import MetadataStore
    from strom.cluster.zk_store import ZkMetadataStore
    from strom.config import LiveConfig
    from strom.storage.log import LogConfig
    from strom.storage.log_manager import LogManager, NewLogs

log = logging.getLogger("strom.topics")

T = TypeVar("T")

# Kafka's bound on the partitions one request may create, summed over its topics (KRaft's
# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH): checked before anything is allocated.
MAX_PARTITIONS_PER_REQUEST = 10_000


class TopicError(Exception):
    """A refused topic operation; ``error_code`` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def refuse_excessive_partitions(count: int) -> None:
    """POLICY_VIOLATION when one request would create more than MAX_PARTITIONS_PER_REQUEST
    partitions, as Kafka answers it (CreateTopics, validate-only too, and CreatePartitions)."""
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise TopicError(E.policy_violation, f"The request would create {count} partitions; one request may "
                                             f"create at most {MAX_PARTITIONS_PER_REQUEST}.")


class PeerLeaders(Protocol):
    """The other brokers' view of a topic's leaders (cluster.peer_metadata.PeerMetadata)."""

    async def wait_for_leaders(self, topic: str, partitions: range, timeout_s: float) -> list[int]: ...


class TopicManager:
    """``zk`` is the cluster's metadata store in ZooKeeper (None on a single broker, whose
    ``metadata`` is local); ``spawn`` runs a background task of the broker. Both kinds of store
    tell the replica manager of every topic change: it takes up and drops the partitions and their
    logs, on one broker as in a cluster."""

    def __init__(self, config: LiveConfig, metadata: MetadataStore, log_manager: LogManager,
                 zk: ZkMetadataStore | None, spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]]) -> None:
        self._config = config
        self._metadata = metadata
        self._log_manager = log_manager
        self._zk = zk
        self._spawn = spawn
        # Topics whose creation or partition change is in flight (its file work in a thread), with
        # an event set when it ends. Reserved on the loop before the thread starts, so a second
        # request for the same name finds it taken.
        self._in_flight: dict[str, asyncio.Event] = {}
        # In a cluster: the other brokers' Metadata, which CreateTopics waits on (cluster.peer_metadata).
        self.peers: PeerLeaders | None = None

    def _local_store(self) -> LocalMetadataStore:
        store = self._metadata
        assert isinstance(store, LocalMetadataStore), "a cluster changes topics through ZooKeeper"
        return store

    def log_config(self, topic: TopicInfo) -> LogConfig:
        return self._log_config(topic.configs)

    def _log_config(self, configs: dict[str, str]) -> LogConfig:
        from strom.config import log_config_for

        return log_config_for(self._config.value, configs)

    def being_created(self, name: str) -> bool:
        """The topic's creation is under way: not in the metadata yet, and its name is taken."""
        return name in self._in_flight and self._metadata.get_topic(name) is None

    def reconcile(self) -> None:
        """At start: set aside logs the metadata does not know (a crash while their topic was being
        created or deleted; in a cluster also partitions no longer assigned to this broker), and on
        one broker make sure every partition of every known topic has a log (in a cluster the
        replica manager makes the logs of the partitions assigned here)."""
        lm = self._log_manager
        topics = self._metadata.topics()
        zk = self._zk
        me = self._config.value.broker_id
        for plog in lm.all_logs():
            info = topics.get(plog.topic)
            known = lm.partition_topic_id(plog.topic, plog.partition)
            assignment = zk.assignments.get(plog.topic) if zk is not None else None
            not_here = zk is not None and (assignment is None
                                                or me not in assignment.replicas.get(plog.partition, []))
            if info is None or plog.partition >= info.partitions or known not in (None, info.topic_id) or not_here:
                path = lm.set_aside_stray(plog.topic, plog.partition)
                log.warning("%s-%d is not in the cluster metadata: %s", plog.topic, plog.partition,
                            f"moved aside to {path}" if path else "empty, deleted")
        if zk is not None:
            return
        for topic in topics.values():
            cfg = self.log_config(topic)
            for plog in lm.create_logs(topic.name, range(topic.partitions), topic.topic_id, cfg):
                plog.config = cfg

    def validate_new(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        """Everything a new topic must pass that this broker knows without asking ZooKeeper. In a
        cluster the replication factor is checked against the live brokers where ZooKeeper is read:
        in the creation's thread, or ``validate_async``, or the watched view for auto-creation."""
        from strom.config import ConfigError, validate_topic_configs

        try:
            validate_topic_name(name)
        except ValueError as e:
            raise TopicError(E.invalid_topic_exception, str(e)) from None
        if self._metadata.get_topic(name) is not None or name in self._in_flight:
            raise TopicError(E.topic_already_exists, f"Topic '{name}' already exists.")
        if partitions <= 0:
            raise TopicError(E.invalid_partitions, "Number of partitions must be larger than 0.")
        refuse_excessive_partitions(partitions)  # requests check their sum first; every other way in here
        if replication_factor <= 0:
            raise TopicError(E.invalid_replication_factor, "Replication factor must be larger than 0.")
        if self._zk is None:
            _refuse_replication_factor(replication_factor, 1)
        try:
            validate_topic_configs(configs)
        except ConfigError as e:
            raise TopicError(E.invalid_config, str(e)) from None

    async def validate_async(self, name: str, partitions: int, replication_factor: int,
                             configs: dict[str, str]) -> None:
        """CreateTopics' validate_only: ``validate_new`` plus, in a cluster, the replication factor
        against the live brokers (ZooKeeper's own list, read in a thread, when the watched view is
        short: a broker that registered a moment ago is not refused)."""
        self.validate_new(name, partitions, replication_factor, configs)
        zk = self._zk
        if zk is None:
            return
        count = len(zk.brokers)
        if count < replication_factor:
            with contextlib.suppress(ZooKeeperUnavailable):
                count = len(await zk.run(zk.live_brokers_in_zookeeper))
        _refuse_replication_factor(replication_factor, count)

    def _resolve(self, partitions: int | None, replication_factor: int | None,
                 configs: dict[str, str] | None) -> tuple[int, int, dict[str, str]]:
        """Kafka's defaults for -1 (or missing) partitions and replication factor."""
        cfg = self._config.value
        partitions = cfg.num_partitions if partitions is None or partitions == -1 else partitions
        rf = cfg.default_replication_factor if replication_factor is None or replication_factor == -1 else replication_factor
        return partitions, rf, configs or {}

    def create(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
               configs: dict[str, str] | None = None, internal: bool = False) -> TopicInfo:
        """Create a topic, blocking the caller for the file work: for sync callers and small topics
        (auto-creation, the offsets topic at start). Requests use ``create_async``."""
        partitions, rf, configs = self._resolve(partitions, replication_factor, configs)
        self.validate_new(name, partitions, rf, configs)
        topic_id = uuid.uuid4()
        if self._zk is not None:
            return self._create_in_cluster(name, topic_id, partitions, rf, configs, internal)
        try:
            self._log_manager.create_logs(name, range(partitions), topic_id, self._log_config(configs))
        except OSError as e:
            raise TopicError(E.kafka_storage_error, f"Could not create the logs of '{name}': {e}") from e
        return self._add_topic(name, partitions, configs, topic_id, internal)

    async def create_async(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: dict[str, str] | None = None, internal: bool = False,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        """Create a topic with the file work in a thread; the loop keeps serving meanwhile. Once
        validated, the creation completes even if the caller is cancelled (its client left)."""
        partitions, rf, configs = self._resolve(partitions, replication_factor, configs)
        self.validate_new(name, partitions, rf, configs)
        topic_id = uuid.uuid4()
        if assignment is not None:
            _check_assignment(assignment, rf)
            if self._zk is None:
                _refuse_unknown_brokers(assignment, {self._config.value.broker_id})
        if self._zk is not None:
            store = self._zk

            async def write() -> TopicInfo:  # ZooKeeper round trips, off the loop
                return await store.run(self._create_in_cluster, name, topic_id, partitions, rf, configs,
                                       internal, assignment)

            info = await self._run_reserved(name, write)
            await self.wait_for_leaders(name, range(partitions))
            return info
        new = self._log_manager.prepare_logs(name, range(partitions), topic_id, self._log_config(configs))

        async def finish() -> TopicInfo:
            await self._make_logs(name, new)
            self._log_manager.add_logs(new)
            return self._add_topic(name, partitions, configs, topic_id, internal)

        return await self._run_reserved(name, finish)

    def replication_factor(self, name: str) -> int:
        zk = self._zk
        if zk is None:
            return 1
        assignment = zk.assignments.get(name)
        return len(assignment.replicas.get(0, [])) if assignment is not None else -1

    def _create_in_cluster(self, name: str, topic_id: uuid.UUID, partitions: int, rf: int,
                           configs: dict[str, str], internal: bool,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        """Write the assignment to ZooKeeper; the controller elects the leaders and the brokers
        holding replicas make the logs. Kafka's placement over the live brokers (rack-aware), read
        from ZooKeeper itself: the watch may not yet have delivered a broker that just registered."""
        from strom.cluster.assignment import AssignmentError, assign_replicas

        store = self._zk
        assert store is not None
        try:
            live = store.live_brokers_in_zookeeper()
            if assignment is not None:
                _refuse_unknown_brokers(assignment, set(live))
            replicas = assignment or assign_replicas(live, partitions, rf)
        except AssignmentError as e:
            raise TopicError(E.invalid_replication_factor, str(e)) from None
        except ZooKeeperUnavailable as e:  # retriable: the client tries again
            raise TopicError(E.request_timed_out, f"Could not create '{name}': {e}") from None
        try:
            store.create_topic_assignment(name, topic_id, replicas, configs)
        except Exception as e:  # NodeExists: another broker created it first
            if type(e).__name__ == "NodeExistsError":
                raise TopicError(E.topic_already_exists, f"Topic '{name}' already exists.") from None
            if isinstance(e, ZooKeeperUnavailable):  # retriable: the client tries again
                raise TopicError(E.request_timed_out, f"Could not create '{name}': {e}") from None
            raise TopicError(E.kafka_storage_error, f"Could not create '{name}' in ZooKeeper: {e}") from e
        log.info("created topic %s with %d partitions, replication factor %d (id %s)", name, partitions, rf, topic_id)
        self._warn_deprecated(name, configs)
        return TopicInfo(name, topic_id, partitions, dict(configs), internal)

    async def wait_for_leaders(self, name: str, partitions: range, timeout_s: float = 30.0) -> None:
        """In a cluster: until every partition has a leader in this broker's cache and in every
        other live broker's Metadata (Kafka's CreateTopics answers once the metadata has reached
        the brokers), or the time is up."""
        store = self._zk
        assert store is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not all((s := store.state(name, p)) is not None and s.leader >= 0 for p in partitions):
            if loop.time() >= deadline:
                log.warning("%s: %d partitions without a leader here after %.0f s", name,
                            sum(1 for p in partitions if (s := store.state(name, p)) is None or s.leader < 0),
                            timeout_s)
                return
            await asyncio.sleep(0.02)
        if self.peers is not None:
            behind = await self.peers.wait_for_leaders(name, partitions, max(deadline - loop.time(), 0.1))
            if behind:
                log.warning("%s: brokers %s did not show every leader within %.0f s", name, behind, timeout_s)

    def _add_topic(self, name: str, partitions: int, configs: dict[str, str], topic_id: uuid.UUID,
                   internal: bool) -> TopicInfo:
        topic = self._local_store().create_topic(name, partitions, configs, internal=internal, topic_id=topic_id)
        log.info("created topic %s with %d partitions (id %s)", name, partitions, topic.topic_id)
        self._warn_deprecated(name, configs)
        return topic

    @staticmethod
    def _warn_deprecated(name: str, configs: dict[str, str]) -> None:
        from strom.config import TOPIC_DEFS, no_effect_warnings

        for line in no_effect_warnings(configs, TOPIC_DEFS, f"topic {name}"):
            log.warning("%s", line)

    def start_auto_create(self, name: str) -> None:
        """Metadata's auto-creation in a cluster, as Kafka's: see ``_start_create``. Metadata
        answers E.leader_not_available meanwhile and the client asks again."""
        partitions, rf, configs = self._resolve(None, None, None)
        self._start_create(name, partitions, rf, configs, internal=False)

    def ensure_internal(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        """An internal topic (__consumer_offsets, __transaction_state), made on first use as Kafka
        makes it; True once it exists. On one broker it is made now (a few small files). In a
        cluster its creation starts in the background and False says it is under way: the
        coordinator lookup answers COORDINATOR_NOT_AVAILABLE and the client asks again. Raises
        TopicError when it cannot be made (fewer live brokers than its replication factor)."""
        if self._metadata.get_topic(name) is not None:
            return True
        if self._zk is None:
            try:
                self.create(name, partitions, replication_factor, configs, internal=True)
            except TopicError as e:  # a CreateTopics of the same name is making it
                if e.error_code != E.topic_already_exists:
                    raise
                return False
            return True
        if name not in self._in_flight:
            self._start_create(name, partitions, replication_factor, configs, internal=True)
        return False

    def _start_create(self, name: str, partitions: int, rf: int, configs: dict[str, str], internal: bool) -> None:
        """A creation in a cluster that nobody waits for: validated now, written to ZooKeeper in a
        thread with the name reserved until its leaders are known, so the loop never waits on
        ZooKeeper and brokers asked at once do not race each other. Raises TopicError when the
        topic is invalid."""
        store = self._zk
        assert store is not None
        self.validate_new(name, partitions, rf, configs)
        # The watched view only: a stale refusal costs nothing, the client asks again.
        _refuse_replication_factor(rf, len(store.brokers))

        async def write() -> None:
            try:
                await store.run(self._create_in_cluster, name, uuid.uuid4(), partitions, rf, configs, internal)
            except TopicError as e:  # nobody waits for the answer: the client's next request learns it
                if e.error_code != E.topic_already_exists:
                    log.warning("could not create topic %s: %s", name, e)
                return
            except Exception:  # e.g. a connection loss kazoo raises as it is: logged, not lost in a task
                log.exception("could not create topic %s", name)
                return
            await self.wait_for_leaders(name, range(partitions))  # still reserved: no second attempt

        self._reserve(name, write)

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions, the new logs made in a thread. Changes to one
        topic run one at a time; the logs enter the metadata only when all are made."""
        while (busy := self._in_flight.get(name)) is not None:
            await busy.wait()
        topic = self._metadata.get_topic(name)
        if topic is None:
            raise TopicError(E.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        if total <= topic.partitions:
            raise TopicError(E.invalid_partitions,
                             f"Topic currently has {topic.partitions} partitions, which is higher than or equal to "
                             f"the requested {total}.")
        refuse_excessive_partitions(total - topic.partitions)
        if self._zk is not None:
            await self._add_partitions_in_cluster(topic, total)
            return
        lm = self._log_manager
        new = lm.prepare_logs(name, range(topic.partitions, total), topic.topic_id, self.log_config(topic))

        async def finish() -> None:
            await self._make_logs(name, new)
            current = self._metadata.get_topic(name)
            if current is None or current.topic_id != topic.topic_id:
                # Deleted while the files were made: they belong to nothing.
                await asyncio.get_running_loop().run_in_executor(None, new.remove)
                lm.cancel_logs(new)
                raise TopicError(E.unknown_topic_or_partition, f"Topic '{name}' was deleted.")
            cfg = self.log_config(current)  # configs may have changed meanwhile
            for plog in lm.add_logs(new):
                plog.config = cfg
            self._local_store().set_partition_count(name, total)
            log.info("topic %s now has %d partitions", name, total)

        await self._run_reserved(name, finish)

    async def _add_partitions_in_cluster(self, topic: TopicInfo, total: int) -> None:
        from strom.cluster.assignment import AssignmentError, assign_replicas

        store = self._zk
        assert store is not None
        current = store.assignments.get(topic.name)
        rf = len(next(iter(current.replicas.values()))) if current and current.replicas else 1
        try:
            brokers = await store.run(store.live_brokers_in_zookeeper)
            replicas = assign_replicas(brokers, total - topic.partitions, rf, first_partition=topic.partitions)
        except AssignmentError as e:
            raise TopicError(E.invalid_replication_factor, str(e)) from None
        except ZooKeeperUnavailable as e:
            raise TopicError(E.request_timed_out, f"Could not add partitions to '{topic.name}': {e}") from None
        await store.run(store.add_partitions, topic.name, replicas)
        await self.wait_for_leaders(topic.name, range(topic.partitions, total))
        log.info("topic %s now has %d partitions", topic.name, total)

    async def _run_reserved(self, name: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` with ``name`` reserved, as a task of its own: a caller that is cancelled
        does not stop it half way (``asyncio.shield``)."""
        return await asyncio.shield(self._reserve(name, work))

    def _reserve(self, name: str, work: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Reserve ``name`` now and run ``work`` in a task that frees it when done."""
        done = self._in_flight[name] = asyncio.Event()

        async def run() -> T:
            try:
                return await work()
            finally:
                del self._in_flight[name]
                done.set()

        return self._spawn(run())

    async def _make_logs(self, name: str, new: NewLogs) -> None:
        lm = self._log_manager
        try:
            await asyncio.get_running_loop().run_in_executor(None, lm.make_logs, new)
        except BaseException as e:
            lm.cancel_logs(new)
            if isinstance(e, OSError):
                raise TopicError(E.kafka_storage_error, f"Could not create the logs of '{name}': {e}") from e
            raise

    def delete(self, name: str) -> None:
        topic = self._metadata.get_topic(name)
        if topic is None:
            raise TopicError(E.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        if self._zk is not None:
            # The controller deletes it; every broker then drops its logs (replica manager).
            try:
                self._zk.request_delete(name)
            except ZooKeeperUnavailable as e:
                raise TopicError(E.request_timed_out, str(e)) from None
            return
        # As in a cluster, the replica manager (told by the store) drops the partitions, wakes what
        # waits on them and removes the logs.
        self._local_store().delete_topic(name)
        log.info("deleted topic %s", name)

    async def wait_deleted(self, names: list[str], timeout_s: float = 30.0) -> list[str]:
        """In a cluster: until the controller has deleted the topics (gone from this broker's
        cache), or the time is up; the names still there then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := [n for n in names if self._metadata.get_topic(n) is not None]) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        return left


def _refuse_replication_factor(replication_factor: int, brokers: int) -> None:
    if replication_factor > brokers:
        raise TopicError(E.invalid_replication_factor,
                         f"Replication factor: {replication_factor} larger than available brokers: {brokers}.")


def _check_assignment(assignment: dict[int, list[int]], rf: int) -> None:
    """A replica assignment given in CreateTopics: partitions 0..n-1, the same number of distinct
    brokers for each (Kafka's E.invalid_replica_assignment otherwise)."""
    if sorted(assignment) != list(range(len(assignment))):
        raise TopicError(E.invalid_replica_assignment, "Partitions must be numbered 0 to n-1 in the assignment.")
    for p, brokers in assignment.items():
        if len(brokers) != rf or len(set(brokers)) != len(brokers):
            raise TopicError(E.invalid_replica_assignment,
                             f"Partition {p} must have {rf} distinct replicas, has {brokers}.")


def _refuse_unknown_brokers(assignment: dict[int, list[int]], known: set[int]) -> None:
    unknown = sorted({b for brokers in assignment.values() for b in brokers} - known)
    if unknown:
        raise TopicError(E.invalid_replica_assignment, f"Unknown broker ids {unknown} in the assignment.")
