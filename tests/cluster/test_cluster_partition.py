"""Network partitions (issue #11): a leader cut off by fault-injecting proxies.

Every broker has two listeners: CLIENT, which clients reach directly, and REPLICATION (the
inter-broker listener), advertised through a FaultProxy in front of it; each broker also reaches
ZooKeeper through a FaultProxy of its own. Isolating a broker cuts its ZooKeeper proxy, its own
REPLICATION proxy (followers fetching from it) and, on the other brokers' REPLICATION proxies, only
the connections it opens, so the others still replicate among themselves.

The claims checked: a leader cut off from its followers and from ZooKeeper acknowledges no acks=all
write after the cut (it can neither advance its high watermark nor shrink its ISR to itself); the
others elect a new leader within the session timeout and a few seconds; after healing the old
leader truncates to the new leader's log and rejoins the ISR; nothing acknowledged to any client is
lost, and the replicas end identical. The same with only the leader's ZooKeeper link cut.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from brokerproc import free_port
from clusterproc import (
    SESSION_TIMEOUT_MS,
    AckLog,
    Cluster,
    StreamingProducer,
    check_acknowledged,
    wait_replicas_identical,
)
from conftest import unique
from faultproxy import FaultProxy, Mode
from helpers import ConnectionClosed, RawConnection, ms, request_class, values_batch, wait_until

pytestmark = pytest.mark.timeout(300)

# "Within zookeeper.session.timeout.ms + a few seconds" of the cut, another broker leads.
ELECTION_WITHIN_S = SESSION_TIMEOUT_MS / 1000 + 5
# How long a cut lasts: past the session expiry, replica.lag.time.max.ms (3 s) and several of the
# prober's acks=all timeouts, so the old leader has every chance to acknowledge wrongly.
CUT_FOR_S = 14.0
PROXY_LIFETIME_S = 600.0  # the module's cluster is long gone by then
REQUEST_TIMED_OUT = 7
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
TRANSACTION_STATE_TOPIC = "__transaction_state"


@dataclass
class Network:
    """The proxies of a cluster whose brokers reach each other and ZooKeeper only through them."""

    cluster: Cluster
    replication: dict[int, FaultProxy] = field(default_factory=dict)  # in front of each REPLICATION port
    zookeeper: dict[int, FaultProxy] = field(default_factory=dict)  # each broker's way to ZooKeeper

    def pid(self, broker_id: int) -> int:
        proc = self.cluster.brokers[broker_id].proc
        assert proc is not None, f"broker {broker_id} is not running"
        return proc.pid

    def isolate(self, broker_id: int, mode: Mode) -> None:
        """Cut the broker off from ZooKeeper and from the other brokers, both ways."""
        self.zookeeper[broker_id].cut(mode)  # first: from now on it cannot change any ISR
        self.replication[broker_id].cut(mode)  # its followers' fetches
        for other, proxy in self.replication.items():
            if other != broker_id:
                proxy.cut(mode, from_pids={self.pid(broker_id)})  # its own fetches from the others

    def heal(self) -> None:
        """Every link back, then settle: what the brokers serve agrees with ZooKeeper again."""
        for proxy in (*self.zookeeper.values(), *self.replication.values()):
            proxy.heal()
        self.cluster.settle()

    def describe(self) -> str:
        return ", ".join(repr(p) for p in (*self.zookeeper.values(), *self.replication.values()))


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    cluster: Cluster | None = None
    proxies: list[FaultProxy] = []
    net_replication: dict[int, FaultProxy] = {}
    net_zookeeper: dict[int, FaultProxy] = {}

    def settings(broker_id: int, client_port: int) -> dict[str, str]:
        assert cluster is not None
        replication_port = free_port()
        repl = FaultProxy(replication_port, f"replication-{broker_id}", PROXY_LIFETIME_S).start()
        zk = FaultProxy(cluster.zookeeper.port, f"zookeeper-{broker_id}", PROXY_LIFETIME_S).start()
        proxies.extend((repl, zk))
        net_replication[broker_id], net_zookeeper[broker_id] = repl, zk
        return {
            "listeners": f"CLIENT://127.0.0.1:{client_port},REPLICATION://127.0.0.1:{replication_port}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{client_port},REPLICATION://127.0.0.1:{repl.port}",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "zookeeper.connect": f"127.0.0.1:{zk.port}",
        }

    root = tmp_path_factory.mktemp("partition")
    cluster = Cluster(root, broker_settings=settings)
    try:
        cluster.start()
        yield Network(cluster, net_replication, net_zookeeper)
    finally:
        cluster.stop()
        for broker_id, b in cluster.brokers.items():  # whole logs, for a post-mortem
            (root / f"broker-{broker_id}.out").write_text(b.log_text())
        for proxy in proxies:
            proxy.stop()


@pytest.fixture
def cluster(network: Network) -> Cluster:
    """This module's cluster (named ``cluster`` so that a failure report carries its logs)."""
    network.heal()
    network.cluster.ensure_all_up()
    return network.cluster


class DirectProber:
    """A client that reaches one broker only: acks=all Produce requests of one record each, sent
    straight to that broker's client port in a thread, never retried, no metadata asked. Records
    every attempt (when it was sent, and Kafka's error code or the exception) and every ack."""

    def __init__(self, bootstrap: str, topic: str, prefix: bytes = b"r", timeout_ms: int = 2000) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.prefix = prefix
        self.timeout_ms = timeout_ms
        self.acks = AckLog()
        self.attempts: list[tuple[float, int | str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DirectProber:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_ms / 1000 + 10)

    def _run(self) -> None:
        req = request_class("produce", 9, "ProduceRequest")
        tpd = request_class("produce", 9, "TopicProduceData")
        ppd = request_class("produce", 9, "PartitionProduceData")
        conn: RawConnection | None = None
        n = 0
        while not self._stop.is_set():
            value = self.prefix + b"%08d" % n
            n += 1
            sent = time.monotonic()
            outcome: int | str
            try:
                if conn is None:
                    conn = RawConnection(self.bootstrap, timeout=self.timeout_ms / 1000 + 3)
                body = req(transactional_id=None, acks=-1, timeout=ms(self.timeout_ms), topic_data=(
                    tpd(name=self.topic, partition_data=(ppd(index=0, records=values_batch([value])),)),))
                (t,) = conn.request(0, 9, body).responses
                (p,) = t.partition_responses
                outcome = int(p.error_code)
                if outcome == 0:
                    with self.acks.lock:
                        self.acks.add(0, int(p.base_offset), value)
            except (OSError, ConnectionClosed) as e:  # a timeout or a reset: try a new connection
                outcome = type(e).__name__
                if conn is not None:
                    conn.close()
                conn = None
            self.attempts.append((sent, outcome))
            self._stop.wait(0.05)
        if conn is not None:
            conn.close()

    def outcomes_sent_between(self, start: float, end: float) -> list[int | str]:
        return [outcome for sent, outcome in list(self.attempts) if start <= sent < end]


def _create(cluster: Cluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    cluster.wait_leader(topic, 0)
    cluster.wait_full_isr(topic, 1)


def _truncated(cluster: Cluster, broker_id: int, topic: str) -> list[str]:
    return [line for line in cluster.brokers[broker_id].log_lines if f"{topic}-0: truncating" in line]


def test_clients_are_told_their_own_listener(cluster: Cluster, network: Network) -> None:
    """A client on CLIENT gets every broker's CLIENT address (never the REPLICATION proxies'), and a
    client on REPLICATION gets the REPLICATION addresses, from Metadata and FindCoordinator."""
    from confluent_kafka.admin import AdminClient

    client_addresses = {b: ("127.0.0.1", p.port) for b, p in cluster.brokers.items()}
    replication_addresses = {b: ("127.0.0.1", p.port) for b, p in network.replication.items()}
    for broker_id, b in cluster.brokers.items():
        with RawConnection(b.bootstrap) as c:
            brokers, coordinator = c.advertised()
        assert brokers == client_addresses
        assert coordinator in client_addresses.values()
        with RawConnection(f"127.0.0.1:{network.replication[broker_id].target_port}") as c:
            brokers, coordinator = c.advertised()
        assert brokers == replication_addresses
        assert coordinator in replication_addresses.values()
    # A real client bootstrapped on one CLIENT port learns the others' CLIENT ports.
    md = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap}).list_topics(timeout=10)
    assert {b: (m.host, m.port) for b, m in md.brokers.items()} == client_addresses


def _wait_dropped(cluster: Cluster, others: list[int], old: int, topic: str) -> None:
    """The others list a departed leader for a few seconds more (DEPARTED_BROKER_GRACE_S): a
    producer that is to know only them starts once they have dropped it. Met there, a cut-off
    leader that still names itself leader would hold such a producer's writes."""
    for b in others:
        with RawConnection(cluster.brokers[b].bootstrap) as conn:
            wait_until(lambda c=conn: old not in {int(x.node_id) for x in c.metadata([topic]).brokers},
                       10, interval=0.1, what=f"broker {b} to drop the old leader from Metadata")


def test_isolated_leader_acknowledges_nothing_and_truncates_after_healing(cluster: Cluster,
                                                                           network: Network) -> None:
    topic = unique("isolated")
    _create(cluster, topic)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        wait_until(lambda: producer.acks.count() > 100, 30, what="acknowledged records")
        old = cluster.leader(topic, 0)
        others = [b for b in cluster.brokers if b != old]
        # Two more clients that know the old leader only: a librdkafka producer bootstrapped on its
        # CLIENT port (it may learn of the new leader from it, later) and a prober that only ever
        # talks to it.
        with StreamingProducer(cluster, topic, rate_per_s=100, prefix=b"d",
                               bootstrap=cluster.brokers[old].bootstrap) as direct, \
                DirectProber(cluster.brokers[old].bootstrap, topic) as prober:
            wait_until(lambda: direct.acks.count() > 20 and prober.acks.count() > 5, 30,
                       what="acknowledgements from the leader before the cut")
            network.isolate(old, "blackhole")
            cut_at = time.monotonic()
            new = cluster.wait_leader(topic, 0, not_in={old}, timeout=ELECTION_WITHIN_S + 10)
            elected_after = time.monotonic() - cut_at
            _wait_dropped(cluster, others, old, topic)
            # The new leader takes acks=all writes meanwhile (its ISR is the two others): a producer
            # that knows only them (the old leader's registration is gone) gets acknowledgements.
            # ``producer`` may not: librdkafka asks the broker it last sent to for metadata, and the
            # cut-off leader, deaf to ZooKeeper, still names itself leader at the old epoch.
            with StreamingProducer(cluster, topic, rate_per_s=200, prefix=b"s",
                                   bootstrap=",".join(cluster.brokers[b].bootstrap for b in others)) as survivor:
                wait_until(lambda: survivor.acks.count() > 100, 30, what="acks from the new leader during the cut")
                time.sleep(max(0.0, cut_at + CUT_FOR_S - time.monotonic()))
                healed_at = time.monotonic()
                during = prober.outcomes_sent_between(cut_at, healed_at)
                network.heal()
            prober.stop()
            wait_until(lambda: _truncated(cluster, old, topic), 30, what="the old leader to truncate")
            cluster.wait_full_isr(topic, 1, timeout=60)
            for p in (producer, direct):
                before = p.acks.count()
                wait_until(lambda p=p, b=before: p.acks.count() > b + 20, 60, what=f"{p.prefix!r} acks after healing")
    state = cluster.state(topic, 0)
    assert state is not None and state.leader == new and old in state.isr
    assert elected_after < ELECTION_WITHIN_S, f"a new leader only {elected_after:.1f}s after the cut"
    # Cut off, the old leader could not advance its high watermark nor shrink its ISR: the
    # acks=all writes sent to it after the cut all failed (timed out), none was acknowledged.
    assert len(during) >= 3, during
    assert 0 not in during, f"the isolated leader acknowledged writes after the cut: {during}"
    assert REQUEST_TIMED_OUT in during, during
    cluster.brokers[old].wait_for_log("could not shrink the ISR")
    for p in (producer, direct, survivor):
        assert not p.acks.errors, p.acks.errors[:5]
    check_acknowledged(cluster, topic, 1, [producer.acks, direct.acks, survivor.acks, prober.acks])
    wait_replicas_identical(cluster, topic, 1)


def test_leader_cut_from_zookeeper_only_loses_nothing(cluster: Cluster, network: Network) -> None:
    """Its followers still reach it, ZooKeeper does not: its session expires, another broker is
    elected, the followers leave it; its acks=all writes stall, and after healing it follows.
    Until the election it goes on acknowledging (its ISR still fetches): those records are kept."""
    topic = unique("zkcut")
    _create(cluster, topic)
    with StreamingProducer(cluster, topic, rate_per_s=300) as producer:
        wait_until(lambda: producer.acks.count() > 100, 30, what="acknowledged records")
        old = cluster.leader(topic, 0)
        others = [b for b in cluster.brokers if b != old]
        with DirectProber(cluster.brokers[old].bootstrap, topic) as prober:
            wait_until(lambda: prober.acks.count() > 5, 30, what="acknowledgements from the leader before the cut")
            network.zookeeper[old].cut("reset")
            cut_at = time.monotonic()
            cluster.wait_leader(topic, 0, not_in={old}, timeout=ELECTION_WITHIN_S + 10)
            elected_at = time.monotonic()
            _wait_dropped(cluster, others, old, topic)
            with StreamingProducer(cluster, topic, rate_per_s=200, prefix=b"s",
                                   bootstrap=",".join(cluster.brokers[b].bootstrap for b in others)) as survivor:
                wait_until(lambda: survivor.acks.count() > 100, 30, what="acks from the new leader during the cut")
                time.sleep(max(0.0, cut_at + CUT_FOR_S - time.monotonic()))
                healed_at = time.monotonic()
                network.heal()
            # The new leader's followers stopped fetching from the old one as soon as they heard of
            # it (milliseconds after ZooKeeper had it): from then on the old leader acknowledges nothing.
            late = prober.outcomes_sent_between(elected_at + 2, healed_at)
        wait_until(lambda: any("registered again" in line for line in cluster.brokers[old].log_lines), 30,
                   what="the old leader to register again")
        cluster.wait_full_isr(topic, 1, timeout=60)
        before = producer.acks.count()
        wait_until(lambda: producer.acks.count() > before + 100, 60, what="acks after healing")
    assert elected_at - cut_at < ELECTION_WITHIN_S, f"a new leader only {elected_at - cut_at:.1f}s after the cut"
    assert len(late) >= 2 and 0 not in late, f"the deposed leader acknowledged writes: {late}"
    for p in (producer, survivor):
        assert not p.acks.errors, p.acks.errors[:5]
    check_acknowledged(cluster, topic, 1, [producer.acks, survivor.acks, prober.acks])
    wait_replicas_identical(cluster, topic, 1)


def test_admin_requests_fail_fast_while_cut_from_zookeeper(cluster: Cluster, network: Network) -> None:
    """A broker without its ZooKeeper connection answers CreateTopics with the retriable
    REQUEST_TIMED_OUT at once instead of holding its event loop in the ZooKeeper client until the
    link returns; meanwhile it goes on serving produce requests for the partitions it leads."""
    topic = unique("zkadmin")
    _create(cluster, topic)
    leader = cluster.leader(topic, 0)
    network.zookeeper[leader].cut("reset")
    try:
        with RawConnection(cluster.brokers[leader].bootstrap, timeout=5) as conn:
            answers: list[int] = []

            def refused_at_once() -> bool:
                started = time.monotonic()
                answers.append(int(conn.create_topic(unique("during-cut"), 1).error_code))
                assert time.monotonic() - started < 2.0, f"CreateTopics took {time.monotonic() - started:.1f}s"
                return answers[-1] == REQUEST_TIMED_OUT

            wait_until(refused_at_once, 15, interval=0.2, what="CreateTopics refused while cut from ZooKeeper")
            # Quotas and SCRAM credentials live in ZooKeeper too: refused at once, never held.
            quotas = request_class("alter_client_quotas", 1, "AlterClientQuotasRequest")
            q = "kio.schema.alter_client_quotas.v1.request"
            entity, entry, op = (getattr(__import__(q, fromlist=["x"]), n) for n in ("EntityData", "EntryData", "OpData"))
            scram = __import__("kio.schema.alter_user_scram_credentials.v0.request", fromlist=["x"])
            for api_key, version, body, codes in (
                    (49, 1, quotas(entries=(entry(entity=(entity(entity_type="user", entity_name="zk-cut"),),
                                                  ops=(op(key="producer_byte_rate", value=1e6, remove=False),)),),
                                   validate_only=False),
                     lambda r: [e.error_code for e in r.entries]),
                    (51, 0, scram.AlterUserScramCredentialsRequest(deletions=(), upsertions=(
                        scram.ScramCredentialUpsertion(name="zk-cut", mechanism=1, iterations=4096, salt=b"s" * 16,
                                                       salted_password=b"p" * 32),)),
                     lambda r: [e.error_code for e in r.results])):
                started = time.monotonic()
                errors = codes(conn.request(api_key, version, body))
                assert time.monotonic() - started < 2.0, (api_key, time.monotonic() - started)
                assert errors and all(errors), (api_key, errors)
            started = time.monotonic()
            assert conn.produce(topic, 0, values_batch([b"during the cut"]), acks=1).error_code == 0
            assert time.monotonic() - started < 2.0
            # Idempotent producers get their ids from the block the broker took at start, as in Kafka.
            producer_id, epoch = conn.init_producer_id()
            assert producer_id >= 0 and epoch == 0
    finally:
        network.heal()
    # A call the cut broke off half way (kazoo's ConnectionLoss) is the same retriable answer.
    assert set(answers) == {REQUEST_TIMED_OUT}, answers


def test_first_coordinator_lookup_answers_at_once_while_zookeeper_hangs(cluster: Cluster, network: Network) -> None:
    """The first FindCoordinator for a transactional id makes __transaction_state, as in Kafka (the
    group lookup makes __consumer_offsets the same way): in a cluster a ZooKeeper write, done in a
    thread. With the broker's ZooKeeper link hung (a blackhole, shorter than the session timeout),
    lookups are answered COORDINATOR_NOT_AVAILABLE at once instead of holding the event loop;
    after healing the topic is made as configured and the lookup names a coordinator."""
    find = request_class("find_coordinator", 3, "FindCoordinatorRequest")

    def lookup(conn: RawConnection) -> tuple[int, float]:
        started = time.monotonic()
        answer = conn.request(10, 3, find(key=unique("txn"), key_type=1))
        return int(answer.error_code), time.monotonic() - started

    with RawConnection(cluster.brokers[1].bootstrap, timeout=10) as conn:
        (state_topic,) = conn.metadata([TRANSACTION_STATE_TOPIC]).topics
        assert state_topic.error_code == UNKNOWN_TOPIC_OR_PARTITION, \
            "no earlier test of this module may use transactions: this test makes their topic"
        network.zookeeper[1].cut("blackhole")
        answers: list[tuple[int, float]] = []
        try:
            cut_at = time.monotonic()
            while time.monotonic() - cut_at < 1.5:
                answers.append(lookup(conn))
                time.sleep(0.1)
        finally:
            network.heal()
        assert len(answers) >= 3, answers
        assert all(code == COORDINATOR_NOT_AVAILABLE and took < 0.5 for code, took in answers), answers
        wait_until(lambda: lookup(conn)[0] == 0, 30, interval=0.2, what="a coordinator once ZooKeeper is back")
    # transaction.state.log.num.partitions and .replication.factor: 1 and 1 in this cluster.
    replicas = cluster.replicas(TRANSACTION_STATE_TOPIC)
    assert list(replicas) == [0] and len(replicas[0]) == 1, replicas
