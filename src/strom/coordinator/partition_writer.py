"""What a coordinator runtime needs from the broker it runs in, declared here so coordinator/ never
sees the broker (Kafka's group coordinator writes through a ``PartitionWriter`` the same way).

The broker implements these (strom.broker.coordinator_host) and hands them to the runtimes with a
static copy of the settings they read (strom.coordinator.config). All of it:

- ``append``: write batches to partitions of the coordinator's internal topic as their leader and
  wait until the ISR has them (acks=all) and, where the flush policy asks for it, they are fsynced;
- ``local_log``: the partition's log, to replay it when the partition is loaded;
- ``producer_epoch``: the epoch a led partition knows for a producer (TxnOffsetCommit's fencing);
- ``partition_count`` / ``ensure_topic`` / ``live_brokers``: the internal topic's size, and making
  it on first use;
- ``follow_leadership``: which partitions this broker leads, now and as it changes;
- ``spawn``: a background task that lives as long as the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strom.protocol.errors import ErrorCode


class NotLeaderError(Exception):
    """``append`` found a partition this broker does not lead; ``error`` is Kafka's reason
    (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self, topic: str, partition: int, error: ErrorCode) -> None:
        super().__init__(f"this broker does not lead {topic}-{partition} ({error.name})")
        self.error = error


@dataclass(frozen=True, slots=True)
class AppendResult:
    """One appended batch: ``error`` is NONE once the ISR has it (and, when the partition's flush
    policy, log.flush.interval.messages, asks for it, once it is fsynced), else Kafka's error for
    its partition (NOT_LEADER_OR_FOLLOWER when the leadership moved, REQUEST_TIMED_OUT, ...)."""

    error: ErrorCode


# (topic, partition, one record batch)
Batch = tuple[str, int, bytearray]


class LogReader(Protocol):
    """The part of a partition's log a load reads (strom.storage.log.PartitionLog)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes: ...


class LeadershipListener(Protocol):
    """Told by ``PartitionWriter.follow_leadership`` which partitions of a topic this broker leads."""

    def became_leader(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``partition`` at ``leader_epoch`` (Kafka's onElection)."""

    def resigned(self, partition: int) -> None:
        """This broker no longer leads ``partition`` (Kafka's onResignation)."""

    async def leads_every_partition(self) -> None:
        """This broker leads every partition of the topic, at leader epoch 0, and always will (a
        broker on its own): no other call comes."""


class PartitionWriter(Protocol):
    async def append(self, batches: Sequence[Batch], timeout_s: float) -> list[AppendResult]:
        """Append each batch to its partition as the partition's leader, in order, then wait until
        the ISR has them all (acks=all; ``timeout_s`` at most). Raises at the first batch that
        cannot be appended (NotLeaderError, or the log's own error), those before it appended."""
        ...

    def local_log(self, topic: str, partition: int) -> LogReader | None:
        """The partition's log on this broker, if it has one (for a load's replay)."""
        ...

    def producer_epoch(self, topic: str, partition: int, producer_id: int) -> int | None:
        """The epoch the partition knows for the producer, if this broker leads the partition and
        the producer wrote to it."""
        ...

    def partition_count(self, topic: str) -> int | None:
        """The topic's partitions, None while it does not exist."""
        ...

    def ensure_topic(self, topic: str, partitions: int, replication_factor: int, configs: Mapping[str, str]) -> bool:
        """The internal topic exists (True) or its creation is under way (False, in a cluster);
        made the way Kafka makes its internal topics. Raises when it cannot be made."""
        ...

    def live_brokers(self) -> int:
        """How many brokers are registered in the cluster now (1 for a broker on its own)."""
        ...

    async def follow_leadership(self, topic: str, listener: LeadershipListener) -> None:
        """Tell ``listener`` which partitions of ``topic`` this broker leads now and from now on."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background until it ends or the broker stops."""
        ...
