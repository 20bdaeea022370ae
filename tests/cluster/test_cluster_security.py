"""A cluster whose brokers talk to each other over SASL_SSL with SCRAM-SHA-512: the brokers' own
user is created in ZooKeeper first (``strom users add --zookeeper``), followers replicate over the
secured listener (renewing 4-second sessions), a leader is killed under load and nothing
acknowledged is lost; a SCRAM user added
through one broker can log in at every other (ZooKeeper's /config/users)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterproc import (
    SESSION_TIMEOUT_MS,
    Cluster,
    StreamingProducer,
    check_acknowledged,
    wait_replicas_identical,
)
from helpers import wait_until
from saslssl_cluster import BROKER_USER, add_scram_users, inter_broker_sasl_ssl, write_tls_files

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    root = tmp_path_factory.mktemp("secure-cluster")
    write_tls_files(root)

    def broker_settings(broker_id: int, client_port: int) -> dict[str, str]:
        # Sessions of 4 s: the fetchers must log in again several times during the test.
        return {**inter_broker_sasl_ssl(root, client_port), "connections.max.reauth.ms": "4000"}

    c = Cluster(root, broker_settings=broker_settings,
                before_brokers=lambda zk: add_scram_users(zk, BROKER_USER)).start()
    try:
        yield c, root
    finally:
        c.stop()


def test_replication_over_sasl_ssl_survives_a_leader_kill(secure_cluster: tuple[Cluster, Path]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster, _ = secure_cluster
    topic = f"secured-{time.monotonic_ns() % 10**9}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    for p in range(2):
        cluster.wait_leader(topic, p)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        wait_until(lambda: producer.acks.count() > 200, 30, what="acknowledged records")
        cluster.wait_full_isr(topic, 2, timeout=30)  # followers fetch over SASL_SSL
        victim = cluster.leader(topic, 0)
        cluster.brokers[victim].kill()
        cluster.wait_leader(topic, 0, not_in={victim}, timeout=SESSION_TIMEOUT_MS / 1000 + 15)
        before = producer.acks.count()
        wait_until(lambda: producer.acks.count() > before + 200, 60, what="acks after the failover")
        cluster.start_broker(victim)
        cluster.wait_full_isr(topic, 2, timeout=60)
    assert not producer.acks.errors, producer.acks.errors[:5]
    assert check_acknowledged(cluster, topic, 2, producer.acks) == producer.sent
    wait_replicas_identical(cluster, topic, 2)
    def logins() -> int:
        return sum(1 for b in cluster.brokers.values() for line in b.log_lines
                   if "on listener INTERNAL authenticated as User:broker" in line)

    before = logins()
    # A later login proves a session (4 s) has run out and been renewed meanwhile; the ISR held.
    wait_until(lambda: logins() > before, 30, what="an inter-broker login after a session's end")
    cluster.wait_full_isr(topic, 2, timeout=5)
    logs = "\n".join(line for b in cluster.brokers.values() for line in b.log_lines)
    assert "SASL login" not in logs  # no failed inter-broker login
    assert "SASL session expired" not in logs  # fetchers renewed their sessions in time


def test_a_user_added_at_one_broker_logs_in_at_every_broker(secure_cluster: tuple[Cluster, Path]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    cluster, root = secure_cluster
    first = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    name = "erin@example.com"
    up = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"erin-secret")
    admin.alter_user_scram_credentials([up])[name].result(30)
    # Kafka's znode (the name URL-encoded, as Kafka's Sanitizer does) and document.
    data, _ = cluster.zk.get("/config/users/erin%40example.com")
    assert "SCRAM-SHA-512" in json.loads(data)["config"]
    assert any(json.loads(cluster.zk.get(f"/config/changes/{n}")[0])["entity_path"] == "users/erin%40example.com"
               for n in cluster.zk.get_children("/config/changes"))
    for b in cluster.brokers.values():
        internal = next(item.split("//")[1] for item in b.overrides["listeners"].split(",")
                        if item.startswith("INTERNAL"))
        conf = {"bootstrap.servers": internal, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": name, "sasl.password": "erin-secret", "ssl.ca.location": str(root / "ca.pem")}
        wait_until(lambda conf=conf: AdminClient(conf).list_topics(timeout=5).brokers, 20,
                   what=f"erin logged in at broker {b.overrides['broker.id']}")
