"""Partition: one replicated partition on this broker, its role, and on the leader what each
follower has (Kafka's Partition + Replica).

On the leader, every follower fetch tells how far that follower's log reaches (its fetch offset is
its log end offset). From that:
- the high watermark is the lowest log end offset in the ISR (the leader's own included), and only
  moves forward;
- a follower that has not caught up to the leader's log end for ``replica.lag.time.max.ms`` leaves
  the ISR; one that reaches the high watermark again (and the current epoch's start) rejoins it.
ISR changes are proposed here and take effect only once written to ZooKeeper (replica_manager), so a
leader that cannot reach ZooKeeper can never shrink the ISR to itself and acknowledge alone.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.cluster.zk_layout import PartitionState

if TYPE_CHECKING:
    from strom.storage.log import PartitionLog


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1


@dataclass
class Partition:
    topic: str
    partition: int
    log: PartitionLog
    replicas: list[int]
    state: PartitionState
    broker_id: int
    followers: dict[int, FollowerState] = field(default_factory=dict)
    isr_change_in_flight: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    def become_leader(self, state: PartitionState, now_ms: int) -> None:
        """Followers start as caught up now: each gets replica.lag.time.max.ms to show it is."""
        self.state = state
        self.followers = {b: FollowerState(last_caught_up_ms=now_ms) for b in self.replicas if b != self.broker_id}
        self.log.replicated = True

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        f = self.followers.get(replica_id)
        if f is None:
            f = self.followers[replica_id] = FollowerState(last_caught_up_ms=0)
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_end >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_ms = now_ms
        f.last_fetch_leader_end = leader_end

    def maybe_advance_high_watermark(self) -> bool:
        """HW = the lowest log end offset in the ISR; True when it moved."""
        plog = self.log
        low = plog.log_end_offset
        for b in self.state.isr:
            if b == self.broker_id:
                continue
            f = self.followers.get(b)
            low = min(low, f.log_end_offset if f is not None else -1)
        if low > plog.high_watermark:
            plog.update_high_watermark(low)
            return True
        return False

    def isr_to_expand(self, ineligible: Collection[int] = ()) -> list[int]:
        """Followers out of the ISR whose logs reach the high watermark and this epoch's start.

        ``ineligible``: brokers in a controlled shutdown (KIP-841). The controller takes them out of
        the ISR; one that still fetches until it stops must not be put back, or the two undo each
        other with a ZooKeeper write each time, and acks=all waits on a broker that is leaving."""
        plog = self.log
        epoch_start = self._epoch_start()
        return [b for b, f in self.followers.items()
                if b not in self.state.isr and b in self.replicas and b not in ineligible
                and f.log_end_offset >= plog.high_watermark and f.log_end_offset >= epoch_start]

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> list[int]:
        return [b for b in self.state.isr if b != self.broker_id
                and now_ms - self.followers.get(b, FollowerState()).last_caught_up_ms > lag_max_ms]

    def _epoch_start(self) -> int:
        entries = self.log.leader_epoch_cache.entries
        for e in reversed(entries):
            if e.epoch == self.state.leader_epoch:
                return e.start_offset
        return self.log.log_end_offset if not entries or entries[-1].epoch < self.state.leader_epoch else 0
