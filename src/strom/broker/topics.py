"""Topic lifecycle on this broker: create, auto-create, add partitions, delete, per-topic log config.

Keeps the cluster metadata (names, ids, partition counts, configs) and the partition logs on disk in
step: a topic's logs are made first and it enters the metadata last, so it is never visible half
made. Runs on the event loop; the file work of CreateTopics and CreatePartitions (directories,
``partition.metadata``, fsyncs: seconds for a thousand partitions) and the removal of deleted data
go to a thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from strom.cluster.metadata import TopicInfo, validate_topic_name

if TYPE_CHECKING:
    from strom.broker.server import Broker
    from strom.storage.log import LogConfig, PartitionLog
    from strom.storage.log_manager import NewLogs

log = logging.getLogger("strom.topics")

T = TypeVar("T")


class TopicError(Exception):
    """A refused topic operation; ``error_code`` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
KAFKA_STORAGE_ERROR = 56


class TopicManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        # Topics whose creation or partition change is in flight (its file work in a thread), with
        # an event set when it ends. Reserved on the loop before the thread starts, so a second
        # request for the same name finds it taken.
        self._in_flight: dict[str, asyncio.Event] = {}

    def log_config(self, topic: TopicInfo) -> LogConfig:
        return self._log_config(topic.configs)

    def _log_config(self, configs: dict[str, str]) -> LogConfig:
        from strom.config import log_config_for

        return log_config_for(self.broker.config, configs)

    def being_created(self, name: str) -> bool:
        """The topic's creation is under way: not in the metadata yet, and its name is taken."""
        return name in self._in_flight and self.broker.metadata.get_topic(name) is None

    def reconcile(self) -> None:
        """At start: set aside logs the metadata does not know (a crash while their topic was being
        created or deleted), and make sure every partition of every known topic has a log."""
        lm = self.broker.log_manager
        topics = self.broker.metadata.topics()
        for plog in lm.all_logs():
            info = topics.get(plog.topic)
            known = lm.partition_topic_id(plog.topic, plog.partition)
            if info is None or plog.partition >= info.partitions or known not in (None, info.topic_id):
                path = lm.set_aside_stray(plog.topic, plog.partition)
                log.warning("%s-%d is not in the cluster metadata: %s", plog.topic, plog.partition,
                            f"moved aside to {path}" if path else "empty, deleted")
        for topic in topics.values():
            cfg = self.log_config(topic)
            for plog in lm.create_logs(topic.name, range(topic.partitions), topic.topic_id, cfg):
                plog.config = cfg

    def validate_new(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        from strom.config import ConfigError, validate_topic_configs

        try:
            validate_topic_name(name)
        except ValueError as e:
            raise TopicError(INVALID_TOPIC_EXCEPTION, str(e)) from None
        if self.broker.metadata.get_topic(name) is not None or name in self._in_flight:
            raise TopicError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions <= 0:
            raise TopicError(INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise TopicError(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if replication_factor > 1:
            raise TopicError(INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication_factor} larger than available brokers: 1.")
        try:
            validate_topic_configs(configs)
        except ConfigError as e:
            raise TopicError(INVALID_CONFIG, str(e)) from None

    def _resolve(self, partitions: int | None, replication_factor: int | None,
                 configs: dict[str, str] | None) -> tuple[int, int, dict[str, str]]:
        """Kafka's defaults for -1 (or missing) partitions and replication factor."""
        cfg = self.broker.config
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
        try:
            self.broker.log_manager.create_logs(name, range(partitions), topic_id, self._log_config(configs))
        except OSError as e:
            raise TopicError(KAFKA_STORAGE_ERROR, f"Could not create the logs of '{name}': {e}") from e
        return self._add_topic(name, partitions, configs, topic_id, internal)

    async def create_async(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: dict[str, str] | None = None, internal: bool = False) -> TopicInfo:
        """Create a topic with the file work in a thread; the loop keeps serving meanwhile. Once
        validated, the creation completes even if the caller is cancelled (its client left)."""
        partitions, rf, configs = self._resolve(partitions, replication_factor, configs)
        self.validate_new(name, partitions, rf, configs)
        topic_id = uuid.uuid4()
        new = self.broker.log_manager.prepare_logs(name, range(partitions), topic_id, self._log_config(configs))

        async def finish() -> TopicInfo:
            await self._make_logs(name, new)
            self.broker.log_manager.add_logs(new)
            return self._add_topic(name, partitions, configs, topic_id, internal)

        return await self._run_reserved(name, finish)

    def _add_topic(self, name: str, partitions: int, configs: dict[str, str], topic_id: uuid.UUID,
                   internal: bool) -> TopicInfo:
        from strom.config import TOPIC_DEFS, deprecation_warnings

        topic = self.broker.metadata.create_topic(name, partitions, configs, internal=internal, topic_id=topic_id)
        log.info("created topic %s with %d partitions (id %s)", name, partitions, topic.topic_id)
        for line in deprecation_warnings(configs, TOPIC_DEFS, f"topic {name}"):
            log.warning("%s", line)
        return topic

    def get_or_auto_create(self, name: str) -> TopicInfo | None:
        topic = self.broker.metadata.get_topic(name)
        if topic is None and self.broker.config.auto_create_topics_enable and name not in self._in_flight:
            topic = self.create(name)
        return topic

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions, the new logs made in a thread. Changes to one
        topic run one at a time; the logs enter the metadata only when all are made."""
        while (busy := self._in_flight.get(name)) is not None:
            await busy.wait()
        topic = self.broker.metadata.get_topic(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if total <= topic.partitions:
            raise TopicError(INVALID_PARTITIONS,
                             f"Topic currently has {topic.partitions} partitions, which is higher than or equal to "
                             f"the requested {total}.")
        lm = self.broker.log_manager
        new = lm.prepare_logs(name, range(topic.partitions, total), topic.topic_id, self.log_config(topic))

        async def finish() -> None:
            await self._make_logs(name, new)
            current = self.broker.metadata.get_topic(name)
            if current is None or current.topic_id != topic.topic_id:
                # Deleted while the files were made: they belong to nothing.
                await asyncio.get_running_loop().run_in_executor(None, new.remove)
                lm.cancel_logs(new)
                raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' was deleted.")
            cfg = self.log_config(current)  # configs may have changed meanwhile
            for plog in lm.add_logs(new):
                plog.config = cfg
            self.broker.metadata.set_partition_count(name, total)
            log.info("topic %s now has %d partitions", name, total)

        await self._run_reserved(name, finish)

    async def _run_reserved(self, name: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` with ``name`` reserved, as a task of its own: a caller that is cancelled
        does not stop it half way (``asyncio.shield``)."""
        done = self._in_flight[name] = asyncio.Event()

        async def run() -> T:
            try:
                return await work()
            finally:
                del self._in_flight[name]
                done.set()

        return await asyncio.shield(self.broker.spawn(run()))

    async def _make_logs(self, name: str, new: NewLogs) -> None:
        lm = self.broker.log_manager
        try:
            await asyncio.get_running_loop().run_in_executor(None, lm.make_logs, new)
        except BaseException as e:
            lm.cancel_logs(new)
            if isinstance(e, OSError):
                raise TopicError(KAFKA_STORAGE_ERROR, f"Could not create the logs of '{name}': {e}") from e
            raise

    def delete(self, name: str) -> None:
        topic = self.broker.metadata.get_topic(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self.broker.metadata.delete_topic(name)
        paths = self.broker.log_manager.schedule_delete(name)
        for p in range(topic.partitions):
            self.broker.purgatory.notify((name, p))
        # Removing the files can take long: do it off the loop.
        loop = asyncio.get_running_loop()
        self.broker.spawn(loop.run_in_executor(None, self.broker.log_manager.remove_dirs, paths))
        log.info("deleted topic %s", name)

    def partition_log(self, name: str, partition: int) -> PartitionLog | None:
        return self.broker.log_manager.get_log(name, partition)
