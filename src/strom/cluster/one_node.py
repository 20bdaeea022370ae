"""A single broker seen as a one-node cluster: the partition states the replica manager acts on.

A broker without ``zookeeper.connect`` runs the same replica manager as a broker of a cluster, so
min.insync.replicas, the high watermark and leader epochs mean the same on both. What ZooKeeper
holds in a cluster is implied here by the local topic metadata: every partition of every topic has
this broker as its only replica, its leader at epoch 0, and the ISR is this broker alone. Topic
changes reach the replica manager through the local store's listeners, as a cluster's reach it
through the ZooKeeper store's watches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from strom.cluster.metadata import ClusterEvent, LocalMetadataStore, TopicInfo
from strom.cluster.zk_layout import PartitionState, TopicAssignment

T = TypeVar("T")

# The epoch a single broker leads every partition at, from the first start on.
ONE_NODE_LEADER_EPOCH = 0


class _Assignments(Mapping[str, TopicAssignment]):
    """topic -> assignment, computed on demand from the local topics (never stored twice)."""

    def __init__(self, metadata: LocalMetadataStore, broker_id: int) -> None:
        self._metadata = metadata
        self._broker_id = broker_id

    def __getitem__(self, topic: str) -> TopicAssignment:
        info = self._metadata.get_topic(topic)
        if info is None:
            raise KeyError(topic)
        return self._assignment(info)

    def _assignment(self, info: TopicInfo) -> TopicAssignment:
        me = [self._broker_id]
        return TopicAssignment(info.name, info.topic_id, {p: me for p in range(info.partitions)}, {}, {})

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._metadata.topics()))

    def __len__(self) -> int:
        return len(self._metadata.topics())


class OneNodeStates:
    """What the replica manager reads of a cluster (``replication.replica_manager.ReplicaStates``),
    for one broker on its own."""

    def __init__(self, metadata: LocalMetadataStore, broker_id: int) -> None:
        self._metadata = metadata
        self._broker_id = broker_id
        self._state = PartitionState(broker_id, ONE_NODE_LEADER_EPOCH, (broker_id,), 0)
        self.assignments: Mapping[str, TopicAssignment] = _Assignments(metadata, broker_id)
        self.brokers: Mapping[int, Any] = {broker_id: None}
        self.shutting_down: set[int] = set()

    @property
    def listeners(self) -> list[Callable[[ClusterEvent], None]]:
        return self._metadata.listeners

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._metadata.get_topic(name)

    def state(self, topic: str, partition: int) -> PartitionState | None:
        info = self._metadata.get_topic(topic)
        return self._state if info is not None and 0 <= partition < info.partitions else None

    def update_isr(self, topic: str, partition: int, new: PartitionState) -> PartitionState | None:
        """Never asked: a one-node partition has no follower to add or drop."""
        return None

    def update_isrs(self, changes: list[tuple[str, int, PartitionState]]) -> list[PartitionState | None]:
        return [None] * len(changes)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)
