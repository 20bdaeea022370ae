"""A consumer-protocol group driven by heartbeats (coordinator/consumer_group.py): the broker assigns,
members reconcile without stop-the-world, and Kafka's errors for what is wrong."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupSettings,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicImage,
)
from strom.coordinator.reconciliation import Assignment
from strom.protocol.errors import ErrorCode as E

SETTINGS = ConsumerGroupSettings(heartbeat_interval_ms=5000, max_size=10)
ORDERS = uuid.UUID(int=1)
PAYMENTS = uuid.UUID(int=2)


def image(**partitions: int) -> dict[str, TopicImage]:
    ids = {"orders": ORDERS, "payments": PAYMENTS}
    return {name: TopicImage(ids.get(name) or uuid.uuid5(uuid.NAMESPACE_DNS, name), n) for name, n in partitions.items()}


class Client:
    """A well-behaved consumer: it joins, heartbeats with what it owns, and lets revoked
    partitions go by its next heartbeat."""

    def __init__(self, group: ConsumerGroup, name: str, topics: list[str] | None = None, regex: str | None = None,
                 instance_id: str | None = None, assignor: str | None = None) -> None:
        self.group = group
        self.member_id = f"member-{name}"
        self.topics = topics
        self.regex = regex
        self.instance_id = instance_id
        self.assignor = assignor
        self.epoch = 0
        self.owned: Assignment = {}
        self.history: list[Assignment] = []

    def heartbeat(self, metadata: dict[str, TopicImage], settings: ConsumerGroupSettings = SETTINGS) -> HeartbeatResponse:
        joining = self.epoch == 0
        req = HeartbeatRequest(
            group_id=self.group.group_id, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=self.instance_id, rebalance_timeout_ms=30000 if joining else -1,
            subscribed_topic_names=self.topics if joining else None,
            subscribed_topic_regex=self.regex if joining else None,
            server_assignor=self.assignor if joining else None,
            owned=None if joining else self.owned)
        resp = self.group.heartbeat(req, metadata, settings)
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.owned = dict(resp.assignment)
            self.history.append(self.owned)
        return resp

    def count(self) -> int:
        return sum(len(p) for p in self.owned.values())


def owned_exclusively(clients: list[Client]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for c in clients:
        for t, ps in c.owned.items():
            for p in ps:
                assert (t, p) not in seen, f"{t}-{p} owned by two members"
                seen.add((t, p))


def settle(clients: list[Client], metadata: dict[str, TopicImage], rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in clients:
            c.heartbeat(metadata)
            owned_exclusively(clients)


def test_four_members_split_twelve_partitions_three_each() -> None:
    metadata = image(orders=12)
    group = ConsumerGroup("g")
    clients = [Client(group, str(i), ["orders"]) for i in range(4)]
    settle(clients, metadata)
    assert group.is_stable()
    assert [c.count() for c in clients] == [3, 3, 3, 3]
    assert {p for c in clients for p in c.owned[ORDERS]} == set(range(12))
    assert len({c.epoch for c in clients}) == 1 and clients[0].epoch == group.group_epoch


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_a_fifth_member_joins_without_pausing_what_does_not_move(assignor: str) -> None:
    metadata = image(orders=12)
    group = ConsumerGroup("g")
    clients = [Client(group, str(i), ["orders"], assignor=assignor) for i in range(4)]
    settle(clients, metadata)
    before = {c.member_id: set(c.owned[ORDERS]) for c in clients}
    answers_before = {c.member_id: len(c.history) for c in clients}
    newcomer = Client(group, "new", ["orders"], assignor=assignor)
    clients.append(newcomer)
    settle(clients, metadata)
    assert group.is_stable()
    assert sorted(c.count() for c in clients) == [2, 2, 2, 3, 3]
    for c in clients[:4]:
        kept = before[c.member_id] & set(c.owned.get(ORDERS, ()))
        # Every answer the member got on the way listed all the partitions it kept: none paused.
        for seen in c.history[answers_before[c.member_id]:]:
            assert kept <= set(seen.get(ORDERS, frozenset())), (c.member_id, kept, seen)


def test_revocation_comes_before_the_new_owner_gets_the_partition() -> None:
    metadata = image(orders=4)
    group = ConsumerGroup("g")
    a = Client(group, "a", ["orders"])
    a.heartbeat(metadata)
    assert a.owned == {ORDERS: frozenset(range(4))} and a.epoch == 1
    b = Client(group, "b", ["orders"])
    resp = b.heartbeat(metadata)
    assert resp.member_epoch == 2 and resp.assignment == {}  # a still holds what b is to get
    resp = a.heartbeat(metadata)  # told to give up two, at its epoch
    assert resp.member_epoch == 1 and len(a.owned[ORDERS]) == 2
    assert b.heartbeat(metadata).assignment is None and b.owned == {}  # a has not confirmed yet
    a.heartbeat(metadata)  # confirms by owning only the two
    assert a.epoch == 2
    b.heartbeat(metadata)
    assert b.owned[ORDERS] == frozenset(range(4)) - a.owned[ORDERS]
    assert group.is_stable()


def test_a_member_that_leaves_frees_its_partitions_at_once() -> None:
    metadata = image(orders=6)
    group = ConsumerGroup("g")
    a, b = Client(group, "a", ["orders"]), Client(group, "b", ["orders"])
    settle([a, b], metadata)
    epoch = group.group_epoch
    resp = group.heartbeat(HeartbeatRequest("g", b.member_id, -1), metadata, SETTINGS)
    assert resp.member_epoch == -1 and b.member_id not in group.members
    assert group.group_epoch == epoch + 1
    a.heartbeat(metadata)
    assert a.owned == {ORDERS: frozenset(range(6))} and a.epoch == epoch + 1


def test_session_expiry_removes_the_member_like_a_leave() -> None:
    metadata = image(orders=2)
    group = ConsumerGroup("g")
    a, b = Client(group, "a", ["orders"]), Client(group, "b", ["orders"])
    settle([a, b], metadata)
    assert group.remove_member(b.member_id) and not group.remove_member(b.member_id)
    a.heartbeat(metadata)
    assert a.owned == {ORDERS: frozenset({0, 1})}


def test_wrong_epochs_and_unknown_members_are_refused() -> None:
    metadata = image(orders=2)
    group = ConsumerGroup("g")
    a = Client(group, "a", ["orders"])
    a.heartbeat(metadata)
    with pytest.raises(HeartbeatError) as e:
        group.heartbeat(HeartbeatRequest("g", a.member_id, a.epoch + 1), metadata, SETTINGS)
    assert e.value.error == E.fenced_member_epoch
    with pytest.raises(HeartbeatError) as e:
        group.heartbeat(HeartbeatRequest("g", "nobody", 3), metadata, SETTINGS)
    assert e.value.error == E.unknown_member_id
    # Fenced, it rejoins with epoch 0 and is assigned again.
    a.epoch = 0
    a.heartbeat(metadata)
    assert a.owned == {ORDERS: frozenset({0, 1})} and a.epoch > 0


def test_a_static_member_keeps_its_partitions_while_it_restarts() -> None:
    metadata = image(orders=4)
    group = ConsumerGroup("g")
    a, s = Client(group, "a", ["orders"]), Client(group, "s", ["orders"], instance_id="worker-1")
    settle([a, s], metadata)
    held, epoch = s.owned, group.group_epoch
    group.heartbeat(HeartbeatRequest("g", s.member_id, -2, instance_id="worker-1"), metadata, SETTINGS)
    # Another process cannot take the instance while it is held... unless it left (-2): then the
    # restarted member takes over its partitions, and the group does not rebalance.
    again = Client(group, "s2", ["orders"], instance_id="worker-1")
    again.heartbeat(metadata)
    assert again.owned == held and group.group_epoch == epoch
    thief = Client(group, "s3", ["orders"], instance_id="worker-1")
    with pytest.raises(HeartbeatError) as e:
        thief.heartbeat(metadata)
    assert e.value.error == E.unreleased_instance_id


def test_group_max_size() -> None:
    metadata = image(orders=1)
    group = ConsumerGroup("g")
    small = ConsumerGroupSettings(max_size=2)
    Client(group, "a", ["orders"]).heartbeat(metadata, small)
    Client(group, "b", ["orders"]).heartbeat(metadata, small)
    with pytest.raises(HeartbeatError) as e:
        Client(group, "c", ["orders"]).heartbeat(metadata, small)
    assert e.value.error == E.group_max_size_reached


def test_a_regular_expression_picks_up_a_topic_created_later() -> None:
    group = ConsumerGroup("g")
    c = Client(group, "a", regex="orders|pay.*")
    c.heartbeat(image(orders=2, __consumer_offsets=50, other=3))
    assert c.owned == {ORDERS: frozenset({0, 1})}
    epoch = group.group_epoch
    c.heartbeat(image(orders=2, payments=3, other=3))
    assert c.owned == {ORDERS: frozenset({0, 1}), PAYMENTS: frozenset({0, 1, 2})}
    assert group.group_epoch == epoch + 1


def test_new_partitions_of_a_subscribed_topic_are_assigned() -> None:
    group = ConsumerGroup("g")
    c = Client(group, "a", ["orders"])
    c.heartbeat(image(orders=2))
    c.heartbeat(image(orders=5))
    assert c.owned == {ORDERS: frozenset(range(5))}


def test_a_lost_answer_is_sent_again() -> None:
    """A member that missed the answer moving it on heartbeats with its previous epoch: accepted,
    and the assignment comes again."""
    metadata = image(orders=2)
    group = ConsumerGroup("g")
    a = Client(group, "a", ["orders"])
    a.heartbeat(metadata)
    resp = group.heartbeat(HeartbeatRequest("g", a.member_id, 0, rebalance_timeout_ms=30000,
                                            subscribed_topic_names=["orders"]), metadata, SETTINGS)
    assert resp.assignment == {ORDERS: frozenset({0, 1})}


@pytest.mark.parametrize(("req", "error"), [
    (HeartbeatRequest("", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"]), E.invalid_request),
    (HeartbeatRequest("g", "m", 0, subscribed_topic_names=["t"]), E.invalid_request),  # no rebalance timeout
    (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1), E.invalid_request),  # no subscription
    (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"],
                      owned={ORDERS: frozenset({1})}), E.invalid_request),
    (HeartbeatRequest("g", "", 3), E.invalid_request),
    (HeartbeatRequest("g", "m", -3), E.invalid_request),
    (HeartbeatRequest("g", "m", 0, instance_id="", rebalance_timeout_ms=1, subscribed_topic_names=["t"]),
     E.invalid_request),
    (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="("), E.invalid_regular_expression),
    (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], server_assignor="sticky"),
     E.unsupported_assignor),
])
def test_invalid_heartbeats(req: HeartbeatRequest, error: E) -> None:
    with pytest.raises(HeartbeatError) as e:
        ConsumerGroup("g").heartbeat(req, image(t=1), SETTINGS)
    assert e.value.error == error


def test_a_silent_member_expires_after_the_session_timeout() -> None:
    metadata = image(orders=4)
    group = ConsumerGroup("g")
    settings = ConsumerGroupSettings(session_timeout_ms=45000)
    for name, now in (("a", 1000), ("b", 2000)):
        req = HeartbeatRequest("g", f"member-{name}", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["orders"])
        group.heartbeat(req, metadata, settings, now=now)
    assert group.expired(45999) == []
    assert group.expired(46000) == ["member-a"]
    assert group.expired(47000) == ["member-a", "member-b"]


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_expired() -> None:
    metadata = image(orders=4)
    group = ConsumerGroup("g")
    settings = ConsumerGroupSettings(session_timeout_ms=45000)
    a = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=10000, subscribed_topic_names=["orders"])
    epoch = group.heartbeat(a, metadata, settings, now=0).member_epoch
    group.heartbeat(HeartbeatRequest("g", "b", 0, rebalance_timeout_ms=10000, subscribed_topic_names=["orders"]),
                    metadata, settings, now=100)
    everything = {ORDERS: frozenset(range(4))}
    # a is told to revoke at 200, keeps heartbeating without letting go.
    for now in (200, 5000, 9000):
        group.heartbeat(HeartbeatRequest("g", "a", epoch, owned=everything), metadata, settings, now=now)
    assert group.expired(10199) == []
    assert group.expired(10200) == ["a"]
    # Had it let go in time, the deadline would be gone.
    group.heartbeat(HeartbeatRequest("g", "a", epoch, owned={ORDERS: group.members["a"].assignment.assigned[ORDERS]}),
                    metadata, settings, now=10100)
    assert group.members["a"].revocation_deadline is None and group.expired(10200) == []
