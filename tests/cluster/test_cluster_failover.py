"""Failover under load: leaders SIGKILLed, the controller killed, a broker frozen past its ZooKeeper
session, a partition whose whole ISR dies. Afterwards every acknowledged record is there exactly
once, in order, and the replicas are identical."""

from __future__ import annotations

import os
import signal
import time

import pytest
from clusterproc import (
    SESSION_TIMEOUT_MS,
    Cluster,
    StreamingProducer,
    check_acknowledged,
    read_partition,
    wait_replicas_identical,
)
from conftest import unique
from helpers import confluent_produce, wait_until

pytestmark = pytest.mark.timeout(300)


def _create(cluster: Cluster, topic: str, partitions: int, rf: int = 3, assignment: list[list[int]] | None = None,
            config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config or {}) if assignment \
        else NewTopic(topic, partitions, rf, config=config or {})
    admin.create_topics([new])[topic].result(30)
    for p in range(partitions):
        cluster.wait_leader(topic, p)


def test_leader_kills_lose_nothing_acknowledged(cluster: Cluster) -> None:
    topic = unique("kills")
    _create(cluster, topic, 2)
    with StreamingProducer(cluster, topic, rate_per_s=400) as producer:
        for _ in range(3):
            wait_until(lambda: producer.acks.count() > 200, 30, what="acknowledged records")
            before = producer.acks.count()
            victim = cluster.leader(topic, 0)
            cluster.brokers[victim].kill()
            new_leader = cluster.wait_leader(topic, 0, not_in={victim},
                                             timeout=SESSION_TIMEOUT_MS / 1000 + 15)
            assert new_leader != victim
            cluster.start_broker(victim)
            cluster.wait_full_isr(topic, 2, timeout=60)
            wait_until(lambda b=before: producer.acks.count() > b + 200, 60, what="acks after the failover")
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 2, producer.acks) == producer.sent
    cluster.wait_full_isr(topic, 2)
    wait_replicas_identical(cluster, topic, 2)


def test_controller_kill_elects_a_new_controller(cluster: Cluster) -> None:
    topic = unique("ctl")
    _create(cluster, topic, 3)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        wait_until(lambda: producer.acks.count() > 100, 30, what="acknowledged records")
        old = cluster.controller()
        cluster.brokers[old].kill()
        new = wait_until(lambda: (c := cluster.controller()) > 0 and c != old and c, SESSION_TIMEOUT_MS / 1000 + 15,
                         what="a new controller")
        # The new controller does the controller's work: the partitions old led get new leaders.
        for p in range(3):
            cluster.wait_leader(topic, p, not_in={old}, timeout=20)
        before = producer.acks.count()
        wait_until(lambda: producer.acks.count() > before + 100, 60, what="acks under the new controller")
        cluster.start_broker(old)
        cluster.wait_full_isr(topic, 3, timeout=60)
    assert new != old
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 3, producer.acks) == producer.sent
    wait_replicas_identical(cluster, topic, 3)


def test_session_expiry_rejoins_as_follower(cluster: Cluster) -> None:
    """A broker frozen past its ZooKeeper session loses its leaderships; thawed, it notices the
    expired session, registers again and catches up as a follower."""
    topic = unique("expiry")
    _create(cluster, topic, 1)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        wait_until(lambda: producer.acks.count() > 100, 30, what="acknowledged records")
        frozen = cluster.leader(topic, 0)
        proc = cluster.brokers[frozen].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: frozen not in cluster.registered(), SESSION_TIMEOUT_MS / 1000 + 10,
                       what="the frozen broker's session to expire")
            cluster.wait_leader(topic, 0, not_in={frozen}, timeout=20)
            before = producer.acks.count()
            wait_until(lambda: producer.acks.count() > before + 100, 60, what="acks from the new leader")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        wait_until(lambda: frozen in cluster.registered(), 30, what="the broker to register again")
        cluster.wait_full_isr(topic, 1, timeout=60)
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 1, producer.acks) == producer.sent
    wait_replicas_identical(cluster, topic, 1)
    cluster.brokers[frozen].wait_for_log("registered again")


def test_unclean_election_off_keeps_partition_offline(cluster: Cluster) -> None:
    """With the whole ISR dead the partition goes offline instead of electing a replica that may
    lack acknowledged records; it comes back with its last in-sync replica."""
    topic = unique("offline")
    _create(cluster, topic, 1, assignment=[[1, 2]], config={"min.insync.replicas": "1"})
    acked = confluent_produce(cluster.bootstrap, topic, [{"value": b"a%d" % i} for i in range(50)], {"acks": "all"})
    cluster.wait_full_isr(topic, 1)
    cluster.brokers[2].kill()  # the follower dies first: the ISR shrinks to [1]
    wait_until(lambda: (s := cluster.state(topic, 0)) is not None and s.isr == (1,), 20, what="ISR [1]")
    more = confluent_produce(cluster.bootstrap, topic, [{"value": b"b%d" % i} for i in range(50)], {"acks": "all"})
    cluster.brokers[1].kill()  # now the last in-sync replica
    wait_until(lambda: (s := cluster.state(topic, 0)) is not None and s.leader == -1,
               SESSION_TIMEOUT_MS / 1000 + 15, what="the partition to go offline")
    cluster.start_broker(2)  # out of sync: must not lead
    # A later topic's leader proves that the controller has made a whole pass knowing broker 2 is
    # back (each pass decides every partition): had it elected broker 2, it would have done so by then.
    probe = unique("offline-probe")
    _create(cluster, probe, 1, assignment=[[2]])
    cluster.wait_leader(probe, 0)
    state = cluster.state(topic, 0)
    assert state is not None and state.leader == -1, f"an out-of-sync replica was elected: {state}"
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    assert md.topics[topic].partitions[0].leader == -1
    assert md.topics[topic].partitions[0].error is not None  # LEADER_NOT_AVAILABLE
    cluster.start_broker(1)
    assert cluster.wait_leader(topic, 0) == 1
    values = [v for _, v in read_partition(cluster.bootstrap, topic, 0)]
    assert values == [d.value for d in acked + more]
    cluster.wait_full_isr(topic, 1, timeout=60)
    wait_replicas_identical(cluster, topic, 1)


def test_controlled_shutdown_hands_leadership_over_quickly(cluster: Cluster) -> None:
    """SIGTERM: the broker's leaderships move before it exits, so the producer sees only retriable
    errors and no gap of a session timeout."""
    topic = unique("ctlshut")
    _create(cluster, topic, 1)
    cluster.wait_full_isr(topic, 1)
    with StreamingProducer(cluster, topic, rate_per_s=400) as producer:
        wait_until(lambda: producer.acks.count() > 100, 30, what="acknowledged records")
        victim = cluster.leader(topic, 0)
        started = time.monotonic()
        logged_before = len(cluster.brokers[victim].log_lines)  # an earlier test may have expired its session
        assert cluster.brokers[victim].stop() == 0
        stop_took = time.monotonic() - started
        assert cluster.leader(topic, 0) != victim
        before = producer.acks.count()
        wait_until(lambda: producer.acks.count() > before + 100, 30, what="acks from the new leader")
    assert stop_took < SESSION_TIMEOUT_MS / 1000, f"a controlled shutdown took {stop_took:.1f}s"
    assert any("none left to move" in line for line in cluster.brokers[victim].log_lines)
    stop_log = cluster.brokers[victim].log_lines[logged_before:]
    assert not any("ZooKeeper session expired" in line for line in stop_log)  # its own close is not an expiry
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 1, producer.acks) == producer.sent


def test_rolling_restart_under_load(cluster: Cluster) -> None:
    """Every broker restarted in turn (SIGTERM, start, back in the ISR) while a producer writes:
    nothing acknowledged is lost and the replicas end identical."""
    topic = unique("rolling")
    _create(cluster, topic, 3)
    cluster.wait_full_isr(topic, 3)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        for broker_id in sorted(cluster.brokers):
            wait_until(lambda: producer.acks.count() > 50, 30, what="acknowledged records")
            assert cluster.brokers[broker_id].stop() == 0
            cluster.start_broker(broker_id)
            cluster.wait_full_isr(topic, 3, timeout=60)
        before = producer.acks.count()
        wait_until(lambda: producer.acks.count() > before + 100, 30, what="acks after the rolling restart")
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 3, producer.acks) == producer.sent
    wait_replicas_identical(cluster, topic, 3)


def test_metadata_names_the_new_leader_while_the_dead_broker_is_still_listed(cluster: Cluster) -> None:
    """After a leader is SIGKILLed, the first Metadata answers that name its partition's new leader
    still list the dead broker (so librdkafka moves the partition instead of parking it on no
    broker); no answer names a dead broker as a leader; a few seconds later it is gone."""
    from helpers import RawConnection, request_class

    from strom.broker.handlers.metadata import DEPARTED_BROKER_GRACE_S

    topic = unique("departed")
    _create(cluster, topic, 1, assignment=[[2, 3, 1]])
    cluster.wait_full_isr(topic, 1)
    controller = cluster.controller()
    victim = 2
    survivor = next(b for b in (1, 3) if b != controller) if controller != victim else 1
    cluster.brokers[victim].kill()
    try:
        wait_until(lambda: victim not in cluster.registered(), SESSION_TIMEOUT_MS / 1000 + 10,
                   interval=0.02, what="the victim's registration gone")
        with RawConnection(cluster.brokers[survivor].bootstrap) as conn:
            # The survivor learns of the departure through its watch a moment after ZooKeeper has
            # it; until then it rightly still names the victim. DescribeCluster lists only the
            # brokers it knows to be alive, so its answer marks the moment the rules below hold.
            describe = request_class("describe_cluster", 0, "DescribeClusterRequest")

            def survivor_knows() -> bool:
                resp = conn.request(60, 0, describe(include_cluster_authorized_operations=False))
                return victim not in {int(b.broker_id) for b in resp.brokers}

            wait_until(survivor_knows, 10, interval=0.01, what="the survivor seeing the victim gone")
            gone_at = time.monotonic()

            def answer() -> tuple[int, list[int]]:
                md = conn.metadata([topic])
                return int(md.topics[0].partitions[0].leader_id), sorted(int(b.node_id) for b in md.brokers)

            def new_leader_named() -> tuple[int, list[int]] | None:
                leader, brokers = answer()
                assert leader != victim, "a dead broker named as leader"
                return (leader, brokers) if leader > 0 else None

            leader, brokers = wait_until(new_leader_named, 15, interval=0.02, what="the new leader in Metadata")
            named_after = time.monotonic() - gone_at
            assert leader in (1, 3)
            if named_after < DEPARTED_BROKER_GRACE_S - 0.5:  # always so unless the machine stalls for seconds
                assert brokers == [1, 2, 3], (brokers, named_after)
            wait_until(lambda: answer()[1] == sorted({1, 3}), DEPARTED_BROKER_GRACE_S + 5, interval=0.1,
                       what="the dead broker dropped from Metadata")
            assert time.monotonic() - gone_at >= DEPARTED_BROKER_GRACE_S - 0.5
    finally:
        cluster.start_broker(victim)
