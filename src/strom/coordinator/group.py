"""A classic consumer group: its state, members and committed offsets (Kafka's ClassicGroup).

Plain data plus the bookkeeping that keeps it consistent (leader, static members, protocol votes).
The transitions are checked against Kafka's table of valid previous states, below.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field

from strom.coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics

Token = object  # whatever the runtime uses to answer a parked request (a future)
TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # set only by records written with value v1


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Token | None = None
    awaiting_sync: Token | None = None
    # A member that has not yet completed a join: it has no heartbeats to miss, so it is timed
    # out by the new-member join timeout instead (Kafka's isNew).
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not yet rejoined
    pending_sync_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp = now_ms

    # --- members ---

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, instance_id: str, old_id: str,
                              new_id: str) -> tuple[Member, Token | None, Token | None]:
        """Give a static member a new id; returns it and the old id's parked JoinGroup and SyncGroup."""
        member = self.members.pop(old_id)
        old_join, old_sync = member.awaiting_join, member.awaiting_sync
        member.awaiting_join = member.awaiting_sync = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member, old_join, old_sync

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    @property
    def size(self) -> int:
        return len(self.members)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def maybe_elect_new_joined_leader(self) -> bool:
        """At join completion: keep the leader if it rejoined, else pick any member that did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join is not None:
                self.leader_id = member_id
                return True
        return False

    # --- protocols ---

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts[name] == len(self.members) for name, _ in protocols)

    def _protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for m in self.members.values():
            counts.update({name for name, _ in m.protocols})
        return counts

    def select_protocol(self) -> str:
        """Kafka's vote: every member votes its favourite of the protocols all support; most votes wins."""
        counts = self._protocol_counts()
        candidates = {name for name, n in counts.items() if n == len(self.members)}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        # Ties go to the protocol the leader prefers, so the choice is deterministic.
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        return next(name for name, _ in leader.protocols if votes.get(name) == best)

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            got = subscribed_topics(m.metadata_for(self.protocol_name))
            if got is None:
                return None
            topics |= got
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        # Unknown subscriptions count as subscribed: never delete what might be in use.
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()
