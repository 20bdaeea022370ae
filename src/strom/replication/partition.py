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

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from strom.cluster.zk_layout import PartitionState

if TYPE_CHECKING:
    from strom.storage.log import PartitionLog


class FollowerSession(Protocol):
    """A follower's fetch session (KIP-227) as the leader keeps it: each of its fetches covers every
    partition it holds, at the fetch offset last sent, though only changed ones are read."""

    @property
    def alive(self) -> bool: ...
    @property
    def last_used_ms(self) -> int: ...
    def holds(self, key: tuple[str, int]) -> bool: ...


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1
    log_start_offset: int = -1  # as the follower's last fetch reported it (DeleteRecords waits on it)
    # The session of the follower's last fetch of this partition, if any: a later fetch in it that
    # did not name the partition still fetched it at log_end_offset (nothing changed, or the
    # partition would have been read).
    session: FollowerSession | None = None


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

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1,
                        session: FollowerSession | None = None) -> bool:
        """Record a follower's fetch; True when its log start offset moved forward."""
        f = self.followers.get(replica_id)
        if f is None:
            f = self.followers[replica_id] = FollowerState(last_caught_up_ms=0)
        f.session = session
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_end >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_ms = now_ms
        f.last_fetch_leader_end = leader_end
        start_moved = log_start_offset > f.log_start_offset
        if start_moved:
            f.log_start_offset = log_start_offset
        return start_moved

    def low_watermark(self, alive: Container[int]) -> int:
        """The lowest log start offset among this leader and its followers on live brokers (Kafka's
        low watermark): a DeleteRecords is complete once it reaches the requested offset everywhere."""
        low = self.log.log_start_offset
        for b, f in self.followers.items():
            if b in alive and f.log_start_offset >= 0:
                low = min(low, f.log_start_offset)
        return low

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

    def can_join_isr(self, replica_id: int) -> bool:
        """A follower out of the ISR whose log reaches the high watermark and this epoch's start."""
        f = self.followers.get(replica_id)
        return (f is not None and replica_id not in self.state.isr and replica_id in self.replicas
                and f.log_end_offset >= self.log.high_watermark and f.log_end_offset >= self._epoch_start())

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> list[int]:
        return [b for b in self.state.isr if b != self.broker_id
                and now_ms - self.last_caught_up_ms(self.followers.get(b, FollowerState())) > lag_max_ms]

    def before_append(self) -> None:
        """The log end is about to move: a follower whose session covered this partition at the
        old log end was caught up at its last fetch in that session, and is credited with it
        (as in Kafka, a fetch reaching the leader's end at that time), before the follower's state
        stops showing it."""
        end = self.log.log_end_offset
        key = self.key
        for f in self.followers.values():
            s = f.session
            if s is not None and f.log_end_offset >= end and s.alive and s.holds(key):
                used = s.last_used_ms
                f.last_caught_up_ms = max(f.last_caught_up_ms, used)
                if used > f.last_fetch_ms:
                    f.last_fetch_ms = used
                    f.last_fetch_leader_end = end

    def last_caught_up_ms(self, f: FollowerState) -> int:
        """When the follower last had everything: a fetch in its session since then that left this
        partition out fetched it all the same, at the offset it had, which still is the log end."""
        s = f.session
        if s is not None and f.log_end_offset >= self.log.log_end_offset and s.alive and s.holds(self.key):
            return max(f.last_caught_up_ms, s.last_used_ms)
        return f.last_caught_up_ms

    @property
    def epoch_start_offset(self) -> int:
        """Where this leader epoch's records begin in the log: what lies before was written under
        earlier epochs (by earlier leaders)."""
        return self._epoch_start()

    def _epoch_start(self) -> int:
        entries = self.log.leader_epoch_cache.entries
        for e in reversed(entries):
            if e.epoch == self.state.leader_epoch:
                return e.start_offset
        return self.log.log_end_offset if not entries or entries[-1].epoch < self.state.leader_epoch else 0
