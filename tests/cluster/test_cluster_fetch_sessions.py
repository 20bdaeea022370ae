"""Followers fetch through fetch sessions (KIP-227): after the first full Fetch they name only the
partitions whose position changed, the leader answers only those with something to say, idle
partitions stay in the ISR all the same, and replication goes on across a leader change."""

from __future__ import annotations

import time

import pytest
from clusterproc import Cluster, wait_replicas_identical
from conftest import unique
from helpers import confluent_produce

pytestmark = pytest.mark.timeout(240)
LAG_MS = 1500
# A short replica.lag.time.max.ms: a follower whose idle partitions did not count as fetched would
# leave their ISR within it.
CLUSTER_OVERRIDES = {"replica.lag.time.max.ms": str(LAG_MS)}


def test_follower_sessions_keep_idle_partitions_in_sync_and_survive_a_leader_change(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("sessions")
    partitions = 40
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replica_assignment=[[1, 2, 3]] * partitions)])[topic].result(30)
    cluster.wait_full_isr(topic, partitions)
    first = [{"value": b"first-%d" % p, "partition": p} for p in range(partitions)]
    assert len(confluent_produce(cluster.bootstrap, topic, first, {"acks": "all"})) == partitions
    wait_replicas_identical(cluster, topic, partitions)

    # Idle for three times replica.lag.time.max.ms, a few partitions written now and then: every
    # ISR stays full (watched throughout, not only at the end).
    deadline = time.monotonic() + 3 * LAG_MS / 1000
    n = 0
    while time.monotonic() < deadline:
        p = (n * 7) % partitions
        confluent_produce(cluster.bootstrap, topic, [{"value": b"busy-%d" % n, "partition": p}], {"acks": "all"})
        n += 1
        for q in range(partitions):
            state = cluster.state(topic, q)
            assert state is not None and sorted(state.isr) == [1, 2, 3], f"{topic}-{q} ISR shrank: {state}"
    wait_replicas_identical(cluster, topic, partitions)

    # The leader goes: the followers fetch from the new one in new sessions; the old leader comes
    # back as a follower and catches up through its own.
    cluster.brokers[1].kill()
    new_leader = cluster.wait_leader(topic, 0, not_in={1})
    more = [{"value": b"after-%d" % p, "partition": p} for p in range(0, partitions, 5)]
    assert len(confluent_produce(cluster.bootstrap, topic, more, {"acks": "all"})) == len(more)
    cluster.start_broker(1, [topic])
    cluster.wait_full_isr(topic, partitions, timeout=60)
    wait_replicas_identical(cluster, topic, partitions)
    assert cluster.leader(topic, 0) in (new_leader, 1)


def test_a_kept_sessionless_answer_ends_with_the_leadership(cluster: Cluster) -> None:
    """A consumer without sessions (librdkafka's Fetch: every partition, session 0, epoch -1) whose
    idle answer the leader keeps: once a preferred-leader election moves the leadership away, the
    same request gets NOT_LEADER_OR_FOLLOWER, the bytes a fresh connection gets, never the kept
    answer; on the new leader, its first answer is the full path's."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from helpers import RawConnection, wait_until
    from test_fetch_idle_answer import sessionless

    from strom.protocol import wire

    topic = unique("kept")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replica_assignment=[[1, 2, 3], [2, 1, 3]])])[topic] \
        .result(30)
    cluster.wait_full_isr(topic, 2)
    cluster.brokers[1].stop()  # controlled shutdown: broker 2 takes partition 0 over
    assert cluster.wait_leader(topic, 0, not_in={1}) == 2
    cluster.start_broker(1, [topic])
    cluster.wait_full_isr(topic, 2)
    assert cluster.leader(topic, 0) == cluster.leader(topic, 1) == 2

    def answer(conn: RawConnection, body: object) -> bytes:
        corr = conn.send(1, 12, body)
        frame = conn.read_frame()
        assert wire.decode_response(1, 12, frame)[0] == corr
        return frame[4:]

    def fresh(broker_id: int, body: object) -> bytes:
        with RawConnection(cluster.brokers[broker_id].bootstrap) as c:
            return answer(c, body)

    kept = RawConnection(cluster.brokers[2].bootstrap)
    body = sessionless(kept, 12, {topic: {0: 0, 1: 0}}, topic_ids={})
    idle = answer(kept, body)
    assert answer(kept, body) == idle == fresh(2, body)  # kept, then reused
    assert all(int(p.error_code) == 0 for t in wire.decode_response(1, 12, b"\0\0\0\0" + idle)[1].responses
               for p in t.partitions)

    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert result[TopicPartition(topic, 0)] is None
    wait_until(lambda: cluster.leader(topic, 0) == 1, 10, what="broker 1 leading partition 0 again")

    def moved() -> bool:
        got = wire.decode_response(1, 12, b"\0\0\0\0" + answer(kept, body))[1]
        return int(got.responses[0].partitions[0].error_code) != 0

    wait_until(moved, 10, what="broker 2 answering as a follower of partition 0")
    after = answer(kept, body)
    assert after == fresh(2, body)
    codes = [int(p.error_code) for t in wire.decode_response(1, 12, b"\0\0\0\0" + after)[1].responses
             for p in t.partitions]
    assert codes == [6, 0]  # NOT_LEADER_OR_FOLLOWER for partition 0; partition 1 still led here
    # Broker 1 leads partition 0 again. It learns so on its own, maybe after broker 2 stepped down:
    # wait for its own answer, on fresh connections (none of them is c1 below).
    one = sessionless(kept, 12, {topic: {0: 0}}, topic_ids={})

    def led_by_1() -> bool:
        got = wire.decode_response(1, 12, b"\0\0\0\0" + fresh(1, one))[1]
        return int(got.responses[0].partitions[0].error_code) == 0

    wait_until(led_by_1, 10, what="broker 1 answering as the leader of partition 0")
    # A connection to it answers from the full path, then reuses that answer.
    with RawConnection(cluster.brokers[1].bootstrap) as c1:
        assert answer(c1, one) == answer(c1, one) == fresh(1, one)
    kept.close()
