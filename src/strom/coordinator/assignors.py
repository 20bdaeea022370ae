"""The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

With the consumer protocol the group coordinator, not a group leader, computes the group's target
assignment. `group.consumer.assignors` lists the assignors the broker offers (Kafka's default
`uniform,range`, the first is the default) and a member picks one with `group.remote.assignor`.

Pure code: an assignor takes the group's members (subscriptions and current target assignment, so
it can be sticky) and the subscribed topics' partition counts, and returns the new target
assignment. Output is deterministic: members, topics and partitions are visited in sorted order,
never in dict or set order, so every coordinator (and a replay) computes the same assignment.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Protocol

TopicId = uuid.UUID
# member id -> topic id -> sorted partitions; every member of the group is present (maybe with {}).
GroupAssignment = dict[str, dict[TopicId, tuple[int, ...]]]

_NO_PARTITIONS: Mapping[TopicId, frozenset[int]] = MappingProxyType({})


class UnsupportedAssignor(Exception):
    """A member asked for an assignor the broker does not offer (Kafka's UNSUPPORTED_ASSIGNOR)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unsupported assignor {name!r}")
        self.name = name


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member as the assignor sees it (Kafka's MemberSubscription plus its MemberAssignment).

    `assignment` is the member's current *target* assignment: the assignors keep what they can of
    it. It may hold partitions the member no longer subscribes to, partitions beyond a topic's count
    or a partition another member also holds (records replayed across a topic's re-creation): the
    assignors drop what is no longer valid instead of trusting it.
    """

    member_id: str
    subscribed_topic_ids: frozenset[TopicId]
    assignment: Mapping[TopicId, frozenset[int]] = field(default_factory=lambda: _NO_PARTITIONS)
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class SubscribedTopicDescriber:
    """The subscribed topics' metadata (Kafka's SubscribedTopicDescriber).

    A topic missing from `partition_counts` counts as a topic with no partitions: the coordinator
    resolves subscriptions against the metadata image, so a topic missing here was deleted in
    between and has nothing to assign. Partition racks are carried for rack-aware assignment and
    not used: neither of Kafka 4's assignors places by rack.
    """

    partition_counts: Mapping[TopicId, int]
    partition_racks: Mapping[TopicId, Mapping[int, frozenset[str]]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def __post_init__(self) -> None:
        for topic_id, count in self.partition_counts.items():
            if count < 0:
                raise ValueError(f"topic {topic_id} has a negative partition count {count}")

    def num_partitions(self, topic_id: TopicId) -> int:
        return self.partition_counts.get(topic_id, 0)


class PartitionAssignor(Protocol):
    """Kafka's ConsumerGroupPartitionAssignor: a name and an assignment function."""

    @property
    def name(self) -> str: ...

    def assign(
        self, members: Iterable[MemberSubscription], topics: SubscribedTopicDescriber
    ) -> GroupAssignment: ...


def _sorted_members(members: Iterable[MemberSubscription]) -> list[MemberSubscription]:
    ordered = sorted(members, key=lambda m: m.member_id)
    for a, b in zip(ordered, ordered[1:], strict=False):
        if a.member_id == b.member_id:
            raise ValueError(f"member {a.member_id!r} appears twice")
    return ordered


def _result(members: list[MemberSubscription], owned: list[dict[TopicId, list[int]]]) -> GroupAssignment:
    """Sorted tuples per topic, topics in id order, empty topics left out."""
    return {
        m.member_id: {t: tuple(sorted(owned[i][t])) for t in sorted(owned[i]) if owned[i][t]}
        for i, m in enumerate(members)
    }


class UniformAssignor:
    """Spreads the subscribed partitions evenly over the members and keeps them where they are.

    Homogeneous subscriptions (every member subscribes to the same topics): the members' partition
    counts differ by at most one, and a member keeps min(what it holds, its quota) of its current
    partitions, the extra partitions going to the members that hold the most, so a join or a leave
    moves only the partitions balance requires.

    Heterogeneous subscriptions: each member keeps its current partitions of topics it still
    subscribes to, the rest go one by one to the least loaded subscriber, then partitions move from
    the most to the least loaded subscriber of each topic until, for every topic, no subscriber
    holding one of its partitions has more than one partition more than any other subscriber. That
    is as balanced as moving one partition at a time gets (Kafka's heterogeneous builder stops at
    the same point); it is not always the global optimum when subscriptions overlap in chains.
    """

    name = "uniform"

    # Passes over the topics in the balancing phase. A pass that moves nothing ends it; each move
    # strictly lowers the sum of squared loads, so it always ends, and the cap only bounds the time
    # spent on pathological overlapping subscriptions (Kafka caps its own loop the same way).
    MAX_BALANCE_PASSES = 64

    def assign(
        self, members: Iterable[MemberSubscription], topics: SubscribedTopicDescriber
    ) -> GroupAssignment:
        ordered = _sorted_members(members)
        if not ordered:
            return {}
        first = ordered[0].subscribed_topic_ids
        if all(m.subscribed_topic_ids == first for m in ordered):
            return self._homogeneous(ordered, topics)
        return self._heterogeneous(ordered, topics)

    def _homogeneous(self, members: list[MemberSubscription], topics: SubscribedTopicDescriber) -> GroupAssignment:
        topic_ids = sorted(t for t in members[0].subscribed_topic_ids if topics.num_partitions(t) > 0)
        counts = {t: topics.num_partitions(t) for t in topic_ids}
        claimed = {t: bytearray(counts[t]) for t in topic_ids}
        kept: list[dict[TopicId, list[int]]] = []
        for m in members:  # in member id order: a partition held twice stays with the first holder
            mine: dict[TopicId, list[int]] = {}
            for t in sorted(m.assignment):
                if t not in claimed:
                    continue
                flags, count = claimed[t], counts[t]
                valid = [p for p in sorted(m.assignment[t]) if 0 <= p < count and not flags[p]]
                for p in valid:
                    flags[p] = 1
                if valid:
                    mine[t] = valid
            kept.append(mine)
        held = [sum(len(ps) for ps in mine.values()) for mine in kept]

        quota, extra = divmod(sum(counts.values()), len(members))
        # The members that hold the most get the extra partitions: fewer partitions move.
        by_held = sorted(range(len(members)), key=lambda i: (-held[i], i))
        quotas = [quota] * len(members)
        for i in by_held[:extra]:
            quotas[i] += 1

        for i, mine in enumerate(kept):
            excess = held[i] - quotas[i]
            if excess <= 0:
                continue
            # Give up the highest partitions of the highest topics first (any choice balances;
            # this one is deterministic and keeps the low, contiguous part of what it holds).
            for t in sorted(mine, reverse=True):
                ps = mine[t]
                take = min(excess, len(ps))
                for p in ps[len(ps) - take:]:
                    claimed[t][p] = 0
                del ps[len(ps) - take:]
                excess -= take
                if excess == 0:
                    break
            held[i] = quotas[i]

        unassigned = [(t, p) for t in topic_ids for p, taken in enumerate(claimed[t]) if not taken]
        pos = 0
        for i, mine in enumerate(kept):  # members in id order fill up with consecutive partitions
            room = quotas[i] - held[i]
            if room <= 0:
                continue
            for t, p in unassigned[pos:pos + room]:
                mine.setdefault(t, []).append(p)
            pos += room
        assert pos >= len(unassigned), "uniform assignor left partitions unassigned"
        return _result(members, kept)

    def _heterogeneous(self, members: list[MemberSubscription], topics: SubscribedTopicDescriber) -> GroupAssignment:
        subscribers: dict[TopicId, list[int]] = {}
        for i, m in enumerate(members):
            for t in m.subscribed_topic_ids:
                if topics.num_partitions(t) > 0:
                    subscribers.setdefault(t, []).append(i)
        counts = {t: topics.num_partitions(t) for t in subscribers}
        owners = {t: [-1] * counts[t] for t in subscribers}
        load = [0] * len(members)
        # Per member and topic, its partitions with the ones it keeps first: the balancing phase
        # moves from the end, so it moves newly assigned partitions before kept ones.
        owned: list[dict[TopicId, list[int]]] = [{} for _ in members]

        # Keep the current partitions of topics each member still subscribes to.
        for i, m in enumerate(members):
            for t in sorted(m.assignment):
                if t not in owners or t not in m.subscribed_topic_ids:
                    continue
                row, count = owners[t], counts[t]
                valid = [p for p in sorted(m.assignment[t]) if 0 <= p < count and row[p] < 0]
                for p in valid:
                    row[p] = i
                if valid:
                    owned[i][t] = valid
                    load[i] += len(valid)

        # Topics with the most partitions per subscriber first, then the fewest subscribers: the
        # topics with the least freedom are placed while the loads are still even.
        order = sorted(
            subscribers, key=lambda t: (-Fraction(counts[t], len(subscribers[t])), len(subscribers[t]), t)
        )
        for t in order:
            row = owners[t]
            free = [p for p, o in enumerate(row) if o < 0]
            if not free:
                continue
            heap = [(load[i], i) for i in subscribers[t]]
            heapq.heapify(heap)
            for p in free:
                n, i = heap[0]
                row[p] = i
                owned[i].setdefault(t, []).append(p)
                load[i] = n + 1
                heapq.heapreplace(heap, (n + 1, i))

        balanceable = [t for t in order if len(subscribers[t]) > 1]
        for _ in range(self.MAX_BALANCE_PASSES):
            moved = 0
            for t in balanceable:
                moved += self._balance_topic(t, subscribers[t], owners[t], owned, load)
            if moved == 0:
                break
        return _result(members, owned)

    @staticmethod
    def _balance_topic(
        t: TopicId, subs: list[int], row: list[int], owned: list[dict[TopicId, list[int]]], load: list[int]
    ) -> int:
        """Move partitions of `t` from its most to its least loaded subscribers; returns how many."""
        # Heaps with lazy deletion: an entry whose load is no longer the member's load is stale.
        least = [(load[i], i) for i in subs]
        most = [(-load[i], i) for i in subs if owned[i].get(t)]
        heapq.heapify(least)
        heapq.heapify(most)
        moved = 0
        while most:
            neg, src = most[0]
            if -neg != load[src] or not owned[src].get(t):
                heapq.heappop(most)
                continue
            n, dst = least[0]
            if n != load[dst]:
                heapq.heappop(least)
                continue
            if load[src] - load[dst] <= 1:
                break
            p = owned[src][t].pop()
            owned[dst].setdefault(t, []).append(p)
            row[p] = dst
            load[src] -= 1
            load[dst] += 1
            heapq.heapreplace(most, (-load[src], src))
            heapq.heapreplace(least, (load[dst], dst))
            heapq.heappush(least, (load[src], src))
            heapq.heappush(most, (-load[dst], dst))
            moved += 1
        return moved


class RangeAssignor:
    """Gives each subscriber of a topic one contiguous range of its partitions.

    Per topic, the partitions are cut into as many ranges as the topic has subscribers, the first
    `count % subscribers` ranges one partition longer (Kafka's layout). Topics with the same
    subscribers and the same partition count form one co-partitioned set: a member gets the same
    range, hence the same partition numbers, in every topic of the set (what joins of co-partitioned
    topics need).

    Which member gets which range: the range it already holds most of across the set (greedy, largest
    overlap first), so a join or a leave moves only what the new range boundaries force. The
    remaining ranges go in order to the remaining members, static members first by instance id, then
    members by member id, as Kafka 4 orders them; with no current assignment the result is Kafka 4's.
    (Kafka 4 recomputes ranges from that order alone, its earlier sticky range assignor could break
    co-partitioning; choosing whole ranges by overlap keeps both properties.)
    """

    name = "range"

    def assign(
        self, members: Iterable[MemberSubscription], topics: SubscribedTopicDescriber
    ) -> GroupAssignment:
        ordered = _sorted_members(members)
        if not ordered:
            return {}
        # Kafka 4's member order: static members by instance id, then dynamic ones by member id.
        rank = sorted(
            range(len(ordered)),
            key=lambda i: (0, ordered[i].instance_id, ordered[i].member_id)
            if ordered[i].instance_id is not None
            else (1, "", ordered[i].member_id),
        )
        subscribers: dict[TopicId, list[int]] = {}
        for i in rank:
            for t in ordered[i].subscribed_topic_ids:
                if topics.num_partitions(t) > 0:
                    subscribers.setdefault(t, []).append(i)

        # Co-partitioned sets: same partition count and same subscribers.
        sets: dict[tuple[int, tuple[int, ...]], list[TopicId]] = {}
        for t in sorted(subscribers):
            sets.setdefault((topics.num_partitions(t), tuple(subscribers[t])), []).append(t)

        owned: list[dict[TopicId, list[int]]] = [{} for _ in ordered]
        for (count, subs), set_topics in sets.items():
            size, longer = divmod(count, len(subs))
            boundary = longer * (size + 1)  # partitions below it are in the longer ranges

            def range_of(p: int, size: int = size, longer: int = longer, boundary: int = boundary) -> int:
                return p // (size + 1) if p < boundary else longer + (p - boundary) // size

            # overlap[(position in subs, range)] = partitions of that range the member holds now.
            overlap: dict[tuple[int, int], int] = {}
            for pos, i in enumerate(subs):
                current = ordered[i].assignment
                for t in set_topics:
                    for p in current.get(t, ()):
                        if 0 <= p < count:
                            key = (pos, range_of(p))
                            overlap[key] = overlap.get(key, 0) + 1
            range_owner = [-1] * len(subs)
            matched = [False] * len(subs)
            for (pos, r), _ in sorted(overlap.items(), key=lambda kv: (-kv[1], kv[0][1], kv[0][0])):
                if range_owner[r] < 0 and not matched[pos]:
                    range_owner[r] = pos
                    matched[pos] = True
            waiting = iter(pos for pos in range(len(subs)) if not matched[pos])
            for r in range(len(subs)):
                if range_owner[r] < 0:
                    range_owner[r] = next(waiting)

            for r, pos in enumerate(range_owner):
                start = r * size + min(r, longer)
                end = start + size + (1 if r < longer else 0)
                if start < end:
                    for t in set_topics:
                        owned[subs[pos]][t] = list(range(start, end))
        return _result(ordered, owned)


# The order is Kafka's default `group.consumer.assignors`: the first is the default assignor.
ASSIGNORS: Mapping[str, PartitionAssignor] = MappingProxyType(
    {"uniform": UniformAssignor(), "range": RangeAssignor()}
)
DEFAULT_ASSIGNOR = "uniform"


def get_assignor(name: str, available: Mapping[str, PartitionAssignor] = ASSIGNORS) -> PartitionAssignor:
    """The assignor a member named in `group.remote.assignor`; UnsupportedAssignor if not offered."""
    try:
        return available[name]
    except KeyError:
        raise UnsupportedAssignor(name) from None
