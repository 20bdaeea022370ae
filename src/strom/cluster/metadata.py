"""Cluster metadata: brokers, topics, topic ids, partition counts, topic configs, producer id blocks.

All access to cluster metadata goes through ``MetadataStore``. ``LocalMetadataStore`` keeps it in one
JSON document in the first log directory, replaced atomically on every change; a ZooKeeper-backed
store can implement the same interface for a multi-broker cluster.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from strom.storage.atomic import write_atomic

# Kafka's Topic.LEGAL_CHARS. Used with fullmatch: "$" alone would also match before a final "\n".
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
METADATA_FILE = "strom-cluster-metadata.json"



class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper connection for a write (defined here, without kazoo, for single-broker imports)."""


def require_connected(zk: Any, where: str) -> None:
    """Raise ZooKeeperUnavailable now when the kazoo client ``zk`` has no connection: kazoo would
    otherwise hold the write (and the thread or event loop running it) until one comes back."""
    if not zk.connected:
        raise ZooKeeperUnavailable(f"no connection to ZooKeeper at {where}")


class InvalidTopicName(ValueError):
    pass


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], and not '.' or '..'."""
    if not name:
        raise InvalidTopicName("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicName(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True)
class ClusterEvent:
    """What changed in the cluster metadata: "brokers", "controller", "topic" (assignment), "state", "topic_config",
    "broker_config", "delete_topics" (a deletion was requested), "controlled_shutdown" (a broker
    asks to hand its leaderships away), "session" (a new ZooKeeper session: ephemeral nodes are gone)."""

    kind: str
    topic: str | None = None
    partition: int | None = None


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataStore(Protocol):
    """What every broker reads and changes the same way, alone or in a cluster. Topics are made
    and removed differently: on one broker in the local store directly (LocalMetadataStore), in a
    cluster through ZooKeeper and the controller (cluster.zk_store)."""

    cluster_id: str

    def topics(self) -> dict[str, TopicInfo]: ...
    def get_topic(self, name: str) -> TopicInfo | None: ...
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def broker_configs(self, resource_name: str) -> dict[str, str]: ...
    def set_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None: ...
    def group_configs(self, group_id: str) -> dict[str, str]: ...
    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None: ...
    def allocate_producer_id(self) -> int: ...


class TopicLookups:
    """Topics by name and by id, as both stores keep them (``_topics`` and ``_by_id``)."""

    _topics: dict[str, TopicInfo]
    _by_id: dict[uuid.UUID, TopicInfo]

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)


class LocalMetadataStore(TopicLookups):
    """Single-broker metadata in a JSON file (written .tmp, fsync, rename, fsync dir)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / METADATA_FILE
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._next_producer_id = 0
        # Dynamic broker configs by resource name: "" = cluster-wide defaults, "<broker.id>" = one broker.
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}  # GROUP resources' configs (share groups)
        self.cluster_id = ""
        # Told of every topic change, as the ZooKeeper store tells its listeners: the replica
        # manager of a one-node cluster follows the topics through them (cluster.one_node).
        self.listeners: list[Callable[[ClusterEvent], None]] = []
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            self.cluster_id = _new_cluster_id()
            self._save()
            return
        doc = json.loads(self.path.read_text())
        self.cluster_id = doc["cluster_id"]
        self._next_producer_id = int(doc.get("next_producer_id", 0))
        self._broker_configs = {str(k): dict(v) for k, v in doc.get("broker_configs", {}).items()}
        self._group_configs = {str(k): dict(v) for k, v in doc.get("group_configs", {}).items()}
        for t in doc.get("topics", []):
            info = TopicInfo(t["name"], uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t.get("configs", {})),
                             bool(t.get("internal", False)))
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "topics": [
                {"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs,
                 "internal": t.internal}
                for t in self._topics.values()
            ],
            "broker_configs": self._broker_configs,
            "group_configs": self._group_configs,
        }
        write_atomic(self.path, json.dumps(doc, indent=1).encode())

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], internal: bool = False,
                     topic_id: uuid.UUID | None = None) -> TopicInfo:
        info = TopicInfo(name, topic_id or uuid.uuid4(), partitions, dict(configs), internal)
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        self._save()
        self._tell(ClusterEvent("topic", name))
        return info

    def delete_topic(self, name: str) -> None:
        info = self._topics.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            self._save()
            self._tell(ClusterEvent("topic", name))

    def set_partition_count(self, name: str, partitions: int) -> None:
        self._topics[name].partitions = partitions
        self._save()
        self._tell(ClusterEvent("topic", name))

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._topics[name].configs = dict(configs)
        self._save()  # ConfigAdmin applies the change itself: no other broker makes one

    def _tell(self, event: ClusterEvent) -> None:
        for listener in list(self.listeners):
            listener(event)

    def broker_configs(self, resource_name: str) -> dict[str, str]:
        """Dynamic broker configs of a BROKER resource ("" for the cluster-wide defaults)."""
        return dict(self._broker_configs.get(resource_name, {}))

    def set_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None:
        if configs:
            self._broker_configs[resource_name] = dict(configs)
        else:
            self._broker_configs.pop(resource_name, None)
        self._save()

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The configs set on a GROUP resource (share.auto.offset.reset, ...)."""
        return dict(self._group_configs.get(group_id, {}))

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        if configs:
            self._group_configs[group_id] = dict(configs)
        else:
            self._group_configs.pop(group_id, None)
        self._save()

    def allocate_producer_id(self) -> int:
        pid = self._next_producer_id
        self._next_producer_id += 1
        self._save()
        return pid


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
