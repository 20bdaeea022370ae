"""Topic lifecycle on this broker: create, auto-create, add partitions, delete, per-topic log config.

Keeps the cluster metadata (names, ids, partition counts, configs) and the partition logs on disk in
step. Runs on the event loop; only the removal of deleted data goes to a thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from strom.cluster.metadata import TopicInfo, validate_topic_name

if TYPE_CHECKING:
    from strom.broker.server import Broker
    from strom.storage.log import LogConfig, PartitionLog

log = logging.getLogger("strom.topics")


class TopicError(Exception):
    """A refused topic operation; ``error_code`` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3


class TopicManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def log_config(self, topic: TopicInfo) -> LogConfig:
        from strom.config import log_config_for

        return log_config_for(self.broker.config, topic.configs)

    def reconcile(self) -> None:
        """At start: make sure every partition of every known topic has a log."""
        lm = self.broker.log_manager
        for topic in self.broker.metadata.topics().values():
            cfg = self.log_config(topic)
            for p in range(topic.partitions):
                plog = lm.get_log(topic.name, p)
                if plog is None:
                    lm.create_log(topic.name, p, topic.topic_id, cfg)
                else:
                    plog.config = cfg

    def validate_new(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        from strom.config import ConfigError, validate_topic_configs

        try:
            validate_topic_name(name)
        except ValueError as e:
            raise TopicError(INVALID_TOPIC_EXCEPTION, str(e)) from None
        if self.broker.metadata.get_topic(name) is not None:
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

    def create(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
               configs: dict[str, str] | None = None, internal: bool = False) -> TopicInfo:
        cfg = self.broker.config
        partitions = cfg.num_partitions if partitions is None or partitions == -1 else partitions
        rf = cfg.default_replication_factor if replication_factor is None or replication_factor == -1 else replication_factor
        configs = configs or {}
        self.validate_new(name, partitions, rf, configs)
        topic = self.broker.metadata.create_topic(name, partitions, configs, internal=internal)
        lcfg = self.log_config(topic)
        for p in range(partitions):
            self.broker.log_manager.create_log(name, p, topic.topic_id, lcfg)
        log.info("created topic %s with %d partitions (id %s)", name, partitions, topic.topic_id)
        return topic

    def get_or_auto_create(self, name: str) -> TopicInfo | None:
        topic = self.broker.metadata.get_topic(name)
        if topic is None and self.broker.config.auto_create_topics_enable:
            topic = self.create(name)
        return topic

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.broker.metadata.get_topic(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if total <= topic.partitions:
            raise TopicError(INVALID_PARTITIONS,
                             f"Topic currently has {topic.partitions} partitions, which is higher than or equal to "
                             f"the requested {total}.")
        lcfg = self.log_config(topic)
        for p in range(topic.partitions, total):
            self.broker.log_manager.create_log(name, p, topic.topic_id, lcfg)
        self.broker.metadata.set_partition_count(name, total)

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
