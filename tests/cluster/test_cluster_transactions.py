"""Transactions in a cluster: the coordinator of a transactional id is the leader of its
__transaction_state partition; markers reach partitions led by other brokers through
WriteTxnMarkers; when the coordinator is killed mid-stream the new leader of that partition takes
over, and every transaction is still all or nothing for read_committed readers."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from clusterproc import SESSION_TIMEOUT_MS, Cluster
from conftest import unique
from helpers import wait_until

from strom.coordinator.records import partition_for

pytestmark = pytest.mark.timeout(240)

CLUSTER_OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}
PARTITIONS = 3
PER_TXN = 6


def _read_committed(bootstrap: str, topic: str, expect_at_least: int, timeout: float = 60) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(500, 0.3) if m.error() is None]
            got += [m.value() for m in msgs]
            if msgs:
                quiet_since = None
            elif len(got) >= expect_at_least:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 2:
                    break
        return got
    finally:
        consumer.close()


def test_transactions_survive_coordinator_failover(cluster: Cluster) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, txn_id = unique("txn-out"), unique("txn-writer")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)

    def new_producer() -> Producer:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 2,
                      "transaction.timeout.ms": 20000, "socket.timeout.ms": 6000})
        p.init_transactions(60)
        return p

    producer = new_producer()
    committed: set[int] = set()
    attempted: set[int] = set()
    coordinator = -1
    n = 0
    deadline = time.monotonic() + 150
    while len(committed) < 40 and time.monotonic() < deadline:
        if n == 12:  # mid-stream: kill the broker that coordinates this transactional id
            coordinator = cluster.wait_leader("__transaction_state", partition_for(txn_id, 3))
            cluster.brokers[coordinator].kill()
        n += 1
        attempted.add(n)
        try:
            producer.begin_transaction()
            for i in range(PER_TXN):
                producer.produce(topic, value=b"t%04d-%d" % (n, i), partition=i % PARTITIONS)
            producer.commit_transaction(30)
            committed.add(n)
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    continue
                except KafkaException:
                    pass
            if err.retriable() and not err.fatal():
                continue  # the coordinator moved: the next round goes to the new one
            producer = new_producer()  # fenced or fatal: a new instance fences the old one
    assert coordinator > 0 and len(committed) >= 40, (coordinator, len(committed), n)
    cluster.wait_leader("__transaction_state", partition_for(txn_id, 3), not_in={coordinator},
                        timeout=SESSION_TIMEOUT_MS / 1000 + 15)

    values = _read_committed(cluster.bootstrap, topic, len(committed) * PER_TXN)
    by_txn: dict[int, list[bytes]] = defaultdict(list)
    for v in values:
        by_txn[int(v[1:5])].append(v)
    assert set(by_txn) >= committed, f"committed transactions missing: {sorted(committed - set(by_txn))[:5]}"
    assert set(by_txn) <= attempted
    broken = {t: len(vs) for t, vs in by_txn.items() if sorted(vs) != [b"t%04d-%d" % (t, i) for i in range(PER_TXN)]}
    assert not broken, f"transactions not all-or-nothing (or duplicated): {list(broken.items())[:5]}"
    # The killed coordinator comes back as a follower; reads stay the same.
    cluster.start_broker(coordinator)
    wait_until(lambda: len(_read_committed(cluster.bootstrap, topic, len(values), timeout=30)) == len(values), 60,
               interval=1, what="the same committed records after the old coordinator is back")


def test_abort_right_after_a_commit_while_its_markers_are_written(cluster: Cluster) -> None:
    """librdkafka sends AddPartitionsToTxn and then EndTxn without waiting for the first answer. A
    commit's markers take a few replicated writes here (RF=3), so the next transaction's
    AddPartitionsToTxn comes while they are out; the coordinator holds it until the commit is
    complete instead of refusing it, and the abort that follows at once finds its transaction
    (before, it met INVALID_TXN_STATE and the producer was fenced for good: librdkafka 0098)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("commit-abort")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # alive until the answer
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    cluster.wait_full_isr(topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique("tx"), "linger.ms": 0})
    producer.init_transactions(30)
    for i in range(20):
        producer.begin_transaction()
        producer.produce(topic, b"committed-%d" % i, partition=0)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, b"aborted-%d" % i, partition=0)
        time.sleep(0.003)  # the AddPartitionsToTxn goes out before the abort starts
        producer.abort_transaction(30)
    values = _read_committed(cluster.bootstrap, topic, 20)
    assert values == [b"committed-%d" % i for i in range(20)], values
