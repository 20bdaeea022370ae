"""Share groups (KIP-932) in a 3-broker cluster, with confluent-kafka's ShareConsumer: the share
partition lives at its topic partition's leader, its state at the share coordinator of its key (the
leader of the key's partition of __share_group_state), reached over ReadShareGroupState /
WriteShareGroupState when it is another broker. Three members share a replicated partition while a
producer streams into it; the partition's leader, or the share coordinator's broker, is SIGKILLed
mid-stream. Every record in the log ends accepted exactly once by the members' accounting, none
whose acceptance was confirmed is delivered again; records in flight at the kill come back."""

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
