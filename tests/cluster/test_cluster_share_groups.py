"""Share groups (KIP-932) in a 3-broker cluster, with confluent-kafka's ShareConsumer: the share
partition lives at its topic partition's leader, its state at the share coordinator of its key (the
leader of the key's partition of __share_group_state), reached over ReadShareGroupState /
WriteShareGroupState when it is another broker. Three members share a replicated partition while a
producer streams into it; the partition's leader, or the share coordinator's broker, is SIGKILLed
mid-stream. Every record in the log ends accepted exactly once by the members' accounting, none
whose acceptance was confirmed is delivered again; records in flight at the kill come back.

The admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets,
DeleteGroups) answered by a group coordinator that is neither the share coordinator of the state
nor the leader of every partition: the state is reached with ReadShareGroupStateSummary (87),
InitializeShareGroupState (83) and DeleteShareGroupState (86), the lag with ListOffsets."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from clusterproc import SESSION_TIMEOUT_MS, Cluster, StreamingProducer, check_acknowledged, read_partition
from conftest import unique
from helpers import RawConnection, request_class, wait_until

from strom.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(300)

STATE_TOPIC = "__share_group_state"
GROUP_RESOURCE = 32  # Kafka's ConfigResource.Type.GROUP


def share_state_coordinator(cluster: Cluster) -> int:
    """The broker coordinating share state (strom makes __share_group_state with one partition):
    asked with FindCoordinator's share key type, which makes the topic on first use, and checked
    against ZooKeeper's leader of its partition."""
    key = "any-group:AAAAAAAAAAAAAAAAAAAAAA:0"

    def found() -> int | None:
        with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
            r = conn.request(10, 6, request_class("find_coordinator", 6, "FindCoordinatorRequest")(
                key_type=2, coordinator_keys=(key,)))
        [c] = r.coordinators
        return int(c.node_id) if c.error_code == E.none else None

    node = wait_until(found, 30, what="a share coordinator")
    leader = cluster.wait_leader(STATE_TOPIC, 0)
    assert node == leader or wait_until(lambda: found() == cluster.leader(STATE_TOPIC, 0), 15)
    return cluster.leader(STATE_TOPIC, 0)


def group_config_at(bootstrap: str, group: str) -> dict[str, str]:
    with RawConnection(bootstrap) as conn:
        r = conn.request(32, 4, request_class("describe_configs", 4, "DescribeConfigsRequest")(
            resources=(request_class("describe_configs", 4, "DescribeConfigsResource")(
                resource_type=GROUP_RESOURCE, resource_name=group, configuration_keys=None),)))
    [res] = r.results
    assert res.error_code == E.none
    return {c.name: c.value for c in res.configs}


def alter_group_config_at(bootstrap: str, group: str, name: str, value: str) -> None:
    rc = "incremental_alter_configs"
    with RawConnection(bootstrap) as conn:
        r = conn.request(44, 1, request_class(rc, 1, "IncrementalAlterConfigsRequest")(
            resources=(request_class(rc, 1, "AlterConfigsResource")(
                resource_type=GROUP_RESOURCE, resource_name=group, configs=(
                    request_class(rc, 1, "AlterableConfig")(name=name, config_operation=0, value=value),)),),
            validate_only=False))
    assert [x.error_code for x in r.responses] == [E.none]


@dataclass
class Accounting:
    """What the members saw: every delivery, and the outcome the client reported for each
    acceptance (confirmed by the broker, or failed: then it may or may not have been applied)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    deliveries: list[tuple[str, int, int, float]] = field(default_factory=list)  # member, offset, count, when
    accepted: Counter[int] = field(default_factory=Counter)
    accepted_at: dict[int, float] = field(default_factory=dict)
    uncertain: set[int] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)

    def on_commit(self, offsets: dict[Any, set[int]], exception: Any) -> None:
        now = time.monotonic()
        with self.lock:
            for offs in offsets.values():
                for o in offs:
                    if exception is None:
                        self.accepted[o] += 1
                        self.accepted_at.setdefault(o, now)
                    else:
                        self.uncertain.add(o)

    def done(self, offsets: set[int]) -> bool:
        with self.lock:
            return offsets <= set(self.accepted) | self.uncertain


def member(bootstrap: str, group: str, topic: str, name: str, acct: Accounting, stop: threading.Event) -> None:
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                       "share.acknowledgement.mode": "explicit", "max.poll.records": 10,
                       "socket.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 1000})
    c.set_acknowledgement_commit_callback(acct.on_commit)
    c.subscribe([topic])
    try:
        while not stop.is_set():
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            now = time.monotonic()
            with acct.lock:
                acct.deliveries.extend((name, m.offset(), m.delivery_count(), now) for m in msgs)
            for m in msgs:
                time.sleep(0.005)  # "processing": keeps the stream going while the leader dies
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                try:
                    c.commit_sync(30)
                except KafkaException:
                    # No answer: each of these was accepted or not; the callback may say which.
                    with acct.lock:
                        acct.uncertain.update(m.offset() for m in msgs if m.offset() not in acct.accepted)
    except BaseException as e:  # reported by the test
        acct.errors.append(e)
    finally:
        with contextlib.suppress(Exception):  # a close during a failover may go unanswered
            c.close()


def run_with_kill(cluster: Cluster, victim_of: str) -> None:
    """Three members share one replicated partition while records stream in; SIGKILL the broker
    named by ``victim_of`` ("leader": the partition's leader, "coordinator": the share coordinator's
    broker) once a third of the way, then check the members' accounting."""
    coordinator = share_state_coordinator(cluster)
    others = [b for b in sorted(cluster.brokers) if b != coordinator]
    leader, third = others
    topic, group = unique("shq"), unique("shg")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # The partition's leader is not the share coordinator, nor is the replica that follows it as
    # leader: the state goes over the network both times.
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, third, coordinator]])])[topic].result(30)
    cluster.settle([topic])
    assert cluster.leader(topic, 0) == leader

    # The leader has read the group's configs (and keeps them); the change made at another broker
    # reaches it all the same.
    assert group_config_at(cluster.brokers[leader].bootstrap, group)["share.auto.offset.reset"] == "latest"
    alter_group_config_at(cluster.brokers[third].bootstrap, group, "share.auto.offset.reset", "earliest")
    wait_until(lambda: group_config_at(cluster.brokers[leader].bootstrap, group)["share.auto.offset.reset"]
               == "earliest", 10, what="the leader seeing the group's new config")

    acct = Accounting()
    stop = threading.Event()
    bootstrap = cluster.bootstrap
    threads = [threading.Thread(target=member, args=(bootstrap, group, topic, f"m{i}", acct, stop), daemon=True)
               for i in range(3)]
    victim = leader if victim_of == "leader" else coordinator
    try:
        with StreamingProducer(cluster, topic, rate_per_s=100) as producer:
            for t in threads:
                t.start()
            wait_until(lambda: len(acct.accepted) >= 150 and len({d[0] for d in acct.deliveries}) == 3, 60,
                       what="150 records accepted, every member served")
            assert acct.accepted_at, "nothing accepted"
            cluster.brokers[victim].kill()
            if victim_of == "leader":
                new_leader = cluster.wait_leader(topic, 0, not_in={victim}, timeout=SESSION_TIMEOUT_MS / 1000 + 15)
                # It read the share partition's state from the share coordinator.
                cluster.brokers[new_leader].wait_for_log(f"share group {group}: {topic}-0 resumes at offset",
                                                         timeout=30)
            else:
                successor = cluster.wait_leader(STATE_TOPIC, 0, not_in={victim},
                                                timeout=SESSION_TIMEOUT_MS / 1000 + 15)
                # The new coordinator read the share partition's state back from __share_group_state.
                cluster.brokers[successor].wait_for_log(f"loaded {STATE_TOPIC}-0 at leader epoch", timeout=30)
            cluster.settle([topic])
            killed_at = len(acct.accepted)
            wait_until(lambda: len(acct.accepted) >= killed_at + 150, 90, what="150 more records accepted")
            producer.stop()
            assert not producer.acks.errors, producer.acks.errors[:3]
        log_offsets = {o for o, _ in read_partition(cluster.bootstrap, topic, 0)}
        assert check_acknowledged(cluster, topic, 1, producer.acks) == len(log_offsets)
        wait_until(lambda: acct.done(log_offsets), 90,
                   what=f"every one of the {len(log_offsets)} records accepted")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        cluster.ensure_all_up()
    assert not acct.errors, acct.errors
    with acct.lock:
        # Accepted exactly once: none twice, none lost (an acceptance the client was not told of
        # is one the broker applied: the record never came again).
        twice = {o: n for o, n in acct.accepted.items() if n > 1}
        assert not twice, f"accepted more than once: {twice}"
        assert set(acct.accepted) | acct.uncertain >= log_offsets
        # None confirmed accepted is delivered again.
        again = [(m, o, n) for m, o, n, t in acct.deliveries if o in acct.accepted_at and t > acct.accepted_at[o]]
        assert not again, f"delivered again after their acceptance: {again[:10]}"
        # Records were delivered again only when in flight at the kill (or told failed): a handful.
        counts = Counter(o for _, o, _, _ in acct.deliveries)
        assert sum(1 for n in counts.values() if n > 1) <= 30, counts.most_common(5)
        assert len(acct.uncertain - set(acct.accepted)) <= 30, sorted(acct.uncertain)[:40]


def test_share_group_survives_its_partition_leader_sigkill(cluster: Cluster) -> None:
    run_with_kill(cluster, "leader")


def test_share_group_survives_its_share_coordinator_sigkill(cluster: Cluster) -> None:
    run_with_kill(cluster, "coordinator")


# ---- the admin APIs across brokers -------------------------------------------------------------


def coordinator_of_group(cluster: Cluster, group: str) -> int | None:
    with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
        r = conn.request(10, 6, request_class("find_coordinator", 6, "FindCoordinatorRequest")(
            key_type=0, coordinator_keys=(group,)))
    [c] = r.coordinators
    return int(c.node_id) if c.error_code == E.none else None


def describe_offsets(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error) of every share partition of ``topic`` the
    group has state for (all asked for: topics null)."""
    mod = __import__("kio.schema.describe_share_group_offsets.v1.request", fromlist=["x"])
    with RawConnection(bootstrap) as conn:
        [g] = conn.request(90, 1, mod.DescribeShareGroupOffsetsRequest(groups=(
            mod.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),))).groups
    assert g.error_code == E.none, g
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in g.topics for p in t.partitions if t.topic_name == topic}


def alter_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> Any:
    mod = __import__("kio.schema.alter_share_group_offsets.v0.request", fromlist=["x"])
    with RawConnection(bootstrap) as conn:
        return conn.request(91, 0, mod.AlterShareGroupOffsetsRequest(group_id=group, topics=(
            mod.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=tuple(
                mod.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                for p, o in offsets.items())),)))


def delete_offsets(bootstrap: str, group: str, topic: str) -> Any:
    mod = __import__("kio.schema.delete_share_group_offsets.v0.request", fromlist=["x"])
    with RawConnection(bootstrap) as conn:
        return conn.request(92, 0, mod.DeleteShareGroupOffsetsRequest(group_id=group, topics=(
            mod.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),)))


def delete_group(bootstrap: str, group: str) -> int:
    with RawConnection(bootstrap) as conn:
        r = conn.request(42, 2, request_class("delete_groups", 2, "DeleteGroupsRequest")(groups_names=(group,)))
    [res] = r.results
    return int(res.error_code)


def state_summary(bootstrap: str, group: str, topic_id: Any, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """ReadShareGroupStateSummary (87) asked of the share coordinator itself: partition -> (error, start offset)."""
    mod = __import__("kio.schema.read_share_group_state_summary.v1.request", fromlist=["x"])
    with RawConnection(bootstrap) as conn:
        r = conn.request(87, 1, mod.ReadShareGroupStateSummaryRequest(group_id=group, topics=(
            mod.ReadStateSummaryData(topic_id=topic_id, partitions=tuple(
                mod.PartitionData(partition=p, leader_epoch=-1) for p in partitions)),)))
    return {p.partition: (int(p.error_code), int(p.start_offset)) for t in r.results for p in t.partitions}


def group_state(bootstrap: str, group: str) -> str:
    with RawConnection(bootstrap) as conn:
        d = conn.request(77, 1, request_class("share_group_describe", 1, "ShareGroupDescribeRequest")(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
    return str(d.group_state)


def consume(bootstrap: str, group: str, topic: str, wanted: set[tuple[int, int]],
            ack: Any = None, extra: set[tuple[int, int]] | None = None) -> list[tuple[int, int, int]]:
    """A ShareConsumer (explicit acknowledgement) polls until it saw every (partition, offset) of
    ``wanted``, acknowledging each delivery with ``ack(partition, offset)`` (ACCEPT by default), and
    leaves. Every delivery: (partition, offset, delivery count)."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([topic])
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 60
    try:
        while not wanted <= {(p, o) for p, o, _ in got}:
            assert time.monotonic() < deadline, f"saw only {sorted(got)}"
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                got.append((m.partition(), m.offset(), m.delivery_count()))
                c.acknowledge(m, ack(m.partition(), m.offset()) if ack else AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync(30)
    finally:
        c.close()
    return got


def test_share_group_admin_apis_when_the_state_lives_on_other_brokers(cluster: Cluster) -> None:
    from confluent_kafka import AcknowledgeType, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    state_at = share_state_coordinator(cluster)

    # The group's coordinator is a broker other than the share coordinator (offsets.topic.num.partitions=3
    # spreads the groups; whichever brokers lead them after earlier tests' kills).
    def coordinated_elsewhere() -> tuple[str, int] | None:
        g = unique("sha")
        c = coordinator_of_group(cluster, g)
        return (g, c) if c is not None and c != state_at else None

    group, a = wait_until(coordinated_elsewhere, 30,
                          what="a group coordinated by another broker than the share coordinator")
    [b] = [x for x in sorted(cluster.brokers) if x not in (state_at, a)]
    at_coordinator = cluster.brokers[a].bootstrap
    with RawConnection(at_coordinator) as conn:
        versions = {k.api_key: (k.min_version, k.max_version) for k in conn.request(
            18, 3, request_class("api_versions", 3, "ApiVersionsRequest")(
                client_software_name="t", client_software_version="1")).api_keys}
    assert versions[83] == (0, 0) and versions[86] == (0, 0) and versions[87] == (0, 1)

    topic = unique("shadm")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    side = unique("shside")  # an empty topic a member holding the group subscribes to
    made = admin.create_topics([NewTopic(topic, 2, replica_assignment=[[a, b, state_at], [b, a, state_at]]),
                                NewTopic(side, 1, replication_factor=3)])
    for f in made.values():
        f.result(30)
    cluster.settle([topic, side])
    assert (cluster.leader(topic, 0), cluster.leader(topic, 1)) == (a, b)
    alter_group_config_at(at_coordinator, group, "share.auto.offset.reset", "earliest")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "acks": "all"})
    for p in (0, 1):
        for i in range(10):
            producer.produce(topic, f"v{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    every = {(p, o) for p in (0, 1) for o in range(10)}

    # Accept 0-5, reject 8-9, give 6-7 back each time they come: start 6, 2 records done after it.
    def first_pass(_p: int, o: int) -> Any:
        return AcknowledgeType.ACCEPT if o < 6 else AcknowledgeType.REJECT if o >= 8 else AcknowledgeType.RELEASE

    consume(cluster.bootstrap, group, topic, every, first_pass)
    wait_until(lambda: group_state(at_coordinator, group) == "Empty", 30, what="the group empty")
    eventually_equal(lambda: describe_offsets(at_coordinator, group, topic),
                     {(topic, 0): (6, 2, E.none), (topic, 1): (6, 2, E.none)}, 30)

    # Alter: partition 0 back to 3 (3-9 delivered again), partition 1 forward to 8.
    r = alter_offsets(at_coordinator, group, topic, {0: 3, 1: 8})
    assert r.error_code == E.none and [p.error_code for t in r.responses for p in t.partitions] == [E.none, E.none]
    assert describe_offsets(at_coordinator, group, topic) == {(topic, 0): (3, 7, E.none), (topic, 1): (8, 2, E.none)}
    # While a member is in the group, no change: NON_EMPTY_GROUP; a group that does not exist: GROUP_ID_NOT_FOUND.
    from confluent_kafka import ShareConsumer

    holder = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    holder.subscribe([side])

    def joined() -> bool:
        holder.poll(0.2)
        return group_state(at_coordinator, group) != "Empty"

    try:
        wait_until(joined, 30, what="a member in the group")
        assert alter_offsets(at_coordinator, group, topic, {0: 0}).error_code == E.non_empty_group
        assert delete_offsets(at_coordinator, group, topic).error_code == E.non_empty_group
        assert delete_group(at_coordinator, group) == E.non_empty_group
    finally:
        holder.close()
    unknown = unique("none")
    assert alter_offsets(cluster.brokers[coordinator_of_group(cluster, unknown) or a].bootstrap, unknown, topic,
                         {0: 0}).error_code == E.group_id_not_found
    wait_until(lambda: group_state(at_coordinator, group) == "Empty", 30, what="the group empty")

    again = consume(cluster.bootstrap, group, topic, {(0, o) for o in range(3, 10)} | {(1, 8), (1, 9)})
    assert {(p, o) for p, o, _ in again} == {(0, o) for o in range(3, 10)} | {(1, 8), (1, 9)}
    wait_until(lambda: group_state(at_coordinator, group) == "Empty", 30, what="the group empty")
    assert describe_offsets(at_coordinator, group, topic) == {(topic, 0): (10, 0, E.none), (topic, 1): (10, 0, E.none)}

    # Delete the offsets: the state is gone; the partitions start again per share.auto.offset.reset.
    r = delete_offsets(at_coordinator, group, topic)
    assert r.error_code == E.none and [t.error_code for t in r.responses] == [E.none]
    assert describe_offsets(at_coordinator, group, topic) == {}
    info = admin.list_topics(topic, timeout=10).topics[topic]
    topic_id = uuid_of(cluster, topic)
    assert state_summary(cluster.brokers[state_at].bootstrap, group, topic_id, [0, 1]) == {0: (0, -1), 1: (0, -1)}
    assert {(p, o) for p, o, _ in consume(cluster.bootstrap, group, topic, every)} == every
    wait_until(lambda: group_state(at_coordinator, group) == "Empty", 30, what="the group empty")
    assert describe_offsets(at_coordinator, group, topic) == {(topic, 0): (10, 0, E.none), (topic, 1): (10, 0, E.none)}

    # Delete the group: its state goes first, at the share coordinator; a new group of that id starts afresh.
    assert delete_group(at_coordinator, group) == E.none
    assert state_summary(cluster.brokers[state_at].bootstrap, group, topic_id, [0, 1]) == {0: (0, -1), 1: (0, -1)}
    assert len(info.partitions) == 2
    fresh = consume(cluster.bootstrap, group, topic, every)
    assert {(p, o) for p, o, _ in fresh} == every and all(n == 1 for _, _, n in fresh)


def eventually_equal(read: Any, expected: Any, timeout: float) -> None:
    """``read()`` gives ``expected`` within ``timeout`` (what it gave last is reported otherwise)."""
    last: list[Any] = [None]

    def same() -> bool:
        last[0] = read()
        return bool(last[0] == expected)

    try:
        wait_until(same, timeout)
    except AssertionError:
        raise AssertionError(f"{last[0]} != {expected}") from None


def uuid_of(cluster: Cluster, topic: str) -> Any:
    with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
        r = conn.request(3, 12, request_class("metadata", 12, "MetadataRequest")(
            topics=(request_class("metadata", 12, "MetadataRequestTopic")(topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    [t] = r.topics
    return t.topic_id
