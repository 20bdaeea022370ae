"""Moving leaders and replicas without stopping traffic: preferred-leader election (ElectLeaders and
auto.leader.rebalance.enable) and partition reassignment (AlterPartitionReassignments)."""

from __future__ import annotations

import pytest
from clusterproc import Cluster, StreamingProducer, check_acknowledged, wait_replicas_identical
from conftest import unique
from helpers import RawConnection, ms, request_class, wait_until

from strom.cluster.zk_layout import PartitionState

pytestmark = pytest.mark.timeout(240)
ELECTION_NOT_NEEDED = 84


def _create(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])[topic] \
        .result(30)
    cluster.wait_full_isr(topic, len(assignment))


def test_elect_preferred_leaders(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique("pref")
    _create(cluster, topic, [[1, 2, 3], [1, 3, 2]])
    assert cluster.leader(topic, 0) == cluster.leader(topic, 1) == 1
    cluster.brokers[1].stop()  # controlled shutdown: brokers 2 and 3 take over
    assert cluster.wait_leader(topic, 0, not_in={1}) == 2
    assert cluster.wait_leader(topic, 1, not_in={1}) == 3
    cluster.start_broker(1)
    cluster.wait_full_isr(topic, 2)
    assert cluster.leader(topic, 0) == 2  # broker 1 is back, but not leading
    assert cluster.leader(topic, 1) == 3

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert result[TopicPartition(topic, 0)] is None  # no error
    wait_until(lambda: cluster.leader(topic, 0) == 1, 10, what="the preferred replica leading again")
    # Already the preferred leader: nothing to do, and Kafka's error says so.
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    error = again[TopicPartition(topic, 0)]
    assert isinstance(error, KafkaError) and error.name() == "ELECTION_NOT_NEEDED"

    # The same request twice in a row on one connection to the controller: the second is decided
    # before ZooKeeper's watch has brought back what the first wrote, and still sees that the
    # preferred replica leads (before, the controller answered it with success and wrote nothing).
    epoch = _state(cluster, topic, 1).leader_epoch
    body = request_class("elect_leaders", 2, "ElectLeadersRequest")(
        election_type=0, timeout=ms(30000),
        topic_partitions=(request_class("elect_leaders", 2, "TopicPartitions")(topic=topic, partitions=(1,)),))
    with RawConnection(cluster.brokers[cluster.controller()].bootstrap) as conn:
        answers = conn.pipelined(43, 2, [body, body])
    codes = [int(a.replica_election_results[0].partition_result[0].error_code) for a in answers]
    assert codes == [0, ELECTION_NOT_NEEDED], codes
    wait_until(lambda: cluster.leader(topic, 1) == 1, 10, what="the preferred replica leading partition 1")
    assert _state(cluster, topic, 1).leader_epoch == epoch + 1  # one election, not two


def _state(cluster: Cluster, topic: str, partition: int) -> PartitionState:
    state = cluster.state(topic, partition)
    assert state is not None, f"no state for {topic}-{partition}"
    return state


def test_reassign_partition_under_load(cluster: Cluster) -> None:
    """Replicas [1, 2] -> [3, 2]: broker 3 copies the log, joins the ISR, takes the leadership from
    1, and broker 1 drops its replica; the producer never loses an acknowledged record."""
    from kafka import KafkaAdminClient, TopicPartition

    topic = unique("move")
    _create(cluster, topic, [[1, 2]])
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
            wait_until(lambda: producer.acks.count() > 200, 30, what="acknowledged records")
            accepted = kp.alter_partition_reassignments({TopicPartition(topic, 0): [3, 2]})
            assert accepted == {TopicPartition(topic, 0): None}
            wait_until(lambda: cluster.replicas(topic)[0] == [3, 2], 60, what="the reassignment to complete")
            assert cluster.leader(topic, 0) == 3
            assert not kp.list_partition_reassignments()
            before = producer.acks.count()
            wait_until(lambda: producer.acks.count() > before + 100, 30, what="acks after the move")
    finally:
        kp.close()
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 1, producer.acks) == producer.sent
    wait_replicas_identical(cluster, topic, 1)
    wait_until(lambda: not (cluster.brokers[1].data_dir / f"{topic}-0").exists(), 20,
               what="broker 1's replica to be deleted")


def test_strom_topics_reassign_command(cluster: Cluster) -> None:
    """`strom topics reassign` moves a partition and waits for it; --list shows nothing left."""
    import subprocess
    import sys

    topic = unique("cli-move")
    _create(cluster, topic, [[2, 3]])

    def strom(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", *args, "-b", cluster.bootstrap],
                              capture_output=True, text=True, timeout=120)

    moved = strom("reassign", topic, "-p", "0", "--replicas", "1,2", "--timeout", "60")
    assert moved.returncode == 0, moved.stderr
    assert "Done." in moved.stdout
    assert cluster.replicas(topic)[0] == [1, 2]
    assert cluster.leader(topic, 0) == 2  # still in the replicas: it keeps leading (Kafka does the same)
    listed = strom("reassign", "--list")
    assert listed.returncode == 0 and "No reassignment in progress" in listed.stderr + listed.stdout
    bad = strom("reassign", topic, "-p", "0", "--replicas", "1,9")
    assert bad.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in bad.stderr
