"""What the admin pages read of a broker: ``BrokerView``, a narrow read-only view that snapshot.py
and collector.py take instead of the Broker. admin/server.py builds it over a running Broker
(``BrokerAdminView``); anything that offers these members (a test's fake included) serves as well.

The coordinators are read through Protocols of their own (``GroupReader``, ``TxnReader``): the
members the pages use, so a coordinator that renames one fails the type check here. Replication
state comes from one method, ``BrokerView.replication()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from strom.broker.metrics import BrokerMetrics
    from strom.cluster.metadata import BrokerInfo, TopicInfo
    from strom.config import BrokerConfig
    from strom.coordinator.api import DescribedConsumerGroup, DescribedGroup, FetchedOffset, ListedGroup
    from strom.coordinator.txn_shard import TxnMetadata
    from strom.protocol.errors import ErrorCode
    from strom.storage.log import PartitionLog


class TopicReader(Protocol):
    """The cluster's topics as this broker knows them."""

    @property
    def cluster_id(self) -> str: ...
    def topics(self) -> dict[str, TopicInfo]: ...
    def get_topic(self, name: str) -> TopicInfo | None: ...


class LogReader(Protocol):
    """This broker's partition logs (leaders' and followers')."""

    def get_log(self, topic: str, partition: int) -> PartitionLog | None: ...
    def all_logs(self) -> list[PartitionLog]: ...


class GroupReader(Protocol):
    """The group coordinator, as the pages read it."""

    @property
    def loaded(self) -> bool: ...
    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListedGroup]: ...
    def describe_group(self, group_id: str) -> DescribedGroup: ...
    def describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup: ...
    def fetch_offsets(self, group_id: str, partitions: Any, require_stable: bool = ...) -> list[FetchedOffset]: ...
    def describe_share_group(self, group_id: str) -> Any: ...


class TxnTable(Protocol):
    @property
    def txns(self) -> Mapping[str, TxnMetadata]: ...


class TxnPlacement(Protocol):
    @property
    def owned(self) -> Mapping[int, int]: ...


class TxnReader(Protocol):
    """The transaction coordinator, as the pages read it."""

    @property
    def loaded(self) -> bool: ...
    @property
    def shard(self) -> TxnTable: ...
    @property
    def placement(self) -> TxnPlacement: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def commits(self) -> int: ...
    @property
    def aborts(self) -> int: ...
    @property
    def timeouts(self) -> int: ...
    @property
    def expired(self) -> int: ...
    def error_for(self, transactional_id: str) -> ErrorCode: ...


@dataclass(frozen=True)
class ReplicationState:
    """This broker's replicas, as Kafka's ReplicaManager and KafkaController gauges count them."""

    partitions: int  # partitions with a replica on this broker
    leaders: int  # partitions this broker leads
    under_replicated: int  # led here, with an ISR smaller than the replica set
    isr_shrinks: int
    isr_expands: int
    active_controller: bool
    one_node: bool  # a broker on its own (no zookeeper.connect): it leads and coordinates everything
    # (topic, partition, follower, leader's log end offset minus the follower's), on partitions led
    # here, for followers that have fetched at least once
    follower_lags: list[tuple[str, int, int, int]] = field(default_factory=list)


class BrokerView(Protocol):
    """A running broker as the admin pages (snapshot.py, collector.py) read it."""

    @property
    def config(self) -> BrokerConfig: ...  # the current settings (dynamic changes included)
    @property
    def metadata(self) -> TopicReader: ...
    @property
    def log_manager(self) -> LogReader: ...
    @property
    def metrics(self) -> BrokerMetrics: ...
    @property
    def node(self) -> BrokerInfo: ...  # this broker on its first advertised listener
    @property
    def started(self) -> bool: ...  # its listeners have been advertised (it has started serving once)
    def kafka_listeners_serving(self) -> bool: ...
    def connection_count(self) -> int: ...
    def handler_names(self) -> dict[int, str]: ...  # api key -> handler module name ("api_versions")
    def group_coordinator(self) -> GroupReader | None: ...  # None until the broker has started it
    def txn_coordinator(self) -> TxnReader | None: ...  # None until the broker has started it
    def share_offsets(self, group_id: str) -> list[dict[str, Any]]: ...  # a share group's share partitions

    def metadata_partitions(self, topic: TopicInfo) -> list[dict[str, Any]]:
        """The topic's partitions as a Metadata response tells clients: leader_id, replica_nodes,
        isr_nodes, offline_replicas, partition_index."""
        ...

    def brokers_and_controller(self) -> tuple[list[dict[str, Any]], int]:
        """The live brokers (node_id, host, port, rack) and the controller's id."""
        ...

    def leader_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log when this broker leads it."""
        ...

    def replication(self) -> ReplicationState:
        """This broker's replicas and their followers (a broker on its own leads every partition,
        alone in its ISR)."""
        ...
