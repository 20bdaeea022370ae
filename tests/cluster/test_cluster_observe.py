"""Seeing the cluster: DescribeCluster through real clients, Kafka's replication metrics on /metrics,
`strom cluster` and `strom topics describe`, the REST API and the web console, on a healthy cluster and
while a broker is SIGKILLed (then started again, so the cluster is whole for the next test).

The module's cluster runs with replica.lag.time.max.ms=1000, below the ZooKeeper session timeout
(3 s): a leader notices a dead follower and shrinks the ISR itself (IsrShrinks counts that) before
the controller learns of the death and would take the follower out of the ISR instead."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from clusterproc import SESSION_TIMEOUT_MS, Cluster
from conftest import unique
from helpers import confluent_produce, wait_until
from test_admin_api import call
from test_cli import ok
from test_console import browser, page, shot  # noqa: F401  (fixtures: Debian's chromium through Playwright)
from test_describe_cluster import describe_cluster
from test_metrics import Samples, admin_url, scrape, value

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster"), overrides={"replica.lag.time.max.ms": "1000"}).start()
    try:
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])[topic].result(30)
    cluster.wait_full_isr(topic, len(assignment))


def _metrics(cluster: Cluster) -> dict[int, Samples]:
    return {i: scrape(admin_url(b)) for i, b in cluster.brokers.items() if b.alive()}


def eventually(check: Callable[[], None], timeout: float = 20) -> None:
    """Run ``check`` until its assertions hold: each broker learns of a change through its own
    ZooKeeper watch, so two brokers (or a broker and the test) may see it a moment apart."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _rest(b: BrokerProcess, path: str) -> Any:
    status, body = call("GET", admin_url(b) + "/api" + path)
    assert status == 200, body
    return body


def test_describe_cluster_shows_every_broker_and_the_controller(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    controller = cluster.controller()
    expected = sorted((i, "127.0.0.1", b.port) for i, b in cluster.brokers.items())
    # Every broker answers every version alike: the same three brokers, the same controller.
    for b in cluster.brokers.values():
        for version in (0, 1, 2):
            resp = describe_cluster(b.bootstrap, version)
            assert int(resp.error_code) == 0
            assert sorted((int(n.broker_id), n.host, int(n.port)) for n in resp.brokers) == expected
            assert int(resp.controller_id) == controller

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # held until the answer
    described = admin.describe_cluster(request_timeout=15).result(20)
    assert sorted((n.id, n.host, n.port) for n in described.nodes) == expected
    assert described.controller.id == controller

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        info = kp.describe_cluster()  # DescribeCluster v2
    finally:
        kp.close()
    assert sorted((b["broker_id"], b["host"], b["port"]) for b in info["brokers"]) == expected
    assert info["controller_id"] == controller and info["cluster_id"] == described.cluster_id


def test_healthy_cluster_everywhere(cluster: Cluster) -> None:
    """Metrics, CLI and REST agree on a healthy cluster: one controller, every partition led once,
    followers caught up, nothing under-replicated or offline."""
    topic = unique("seen")
    _create(cluster, topic, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    confluent_produce(cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 3} for i in range(30)],
                      {"acks": "all"})
    controller = cluster.controller()

    def settled() -> dict[int, Samples] | None:
        m = _metrics(cluster)
        lags = [(labels, v) for s in m.values() for (name, labels), v in s.items()
                if name == "strom_fetcher_lag" and ("topic", topic) in labels]
        ok_ = len(lags) == 6 and all(v == 0 for _, v in lags) and \
            all(value(s, "strom_replica_manager_under_replicated_partitions") == 0 for s in m.values())
        return m if ok_ else None

    # Each leader reports its two followers of each of its partitions, caught up (lag 0).
    m = wait_until(settled, 30, interval=0.5, what="followers caught up, nothing under-replicated")
    assert sum(value(s, "strom_controller_active_controller_count") for s in m.values()) == 1
    assert value(m[controller], "strom_controller_active_controller_count") == 1
    assert all(value(s, "strom_controller_offline_partitions_count") == 0 for s in m.values())
    # Each partition has exactly one leader; this topic has a replica on every broker.
    assert sum(value(s, "strom_replica_manager_leader_count") for s in m.values()) == \
        _rest(cluster.brokers[1], "/cluster")["partitions"]
    assert all(value(s, "strom_replica_manager_partition_count") >= 3 for s in m.values())
    for leader in (1, 2, 3):  # the leader of partition leader-1 reports lag for the other two
        lag = {dict(labels)["replica"] for (name, labels) in m[leader] if name == "strom_fetcher_lag"
               and ("topic", topic) in labels and ("partition", str(leader - 1)) in labels}
        assert lag == {str(b) for b in (1, 2, 3) if b != leader}

    def cli() -> None:  # strom cluster and strom topics describe, from any broker
        c = json.loads(ok("cluster", "--json", "-b", cluster.brokers[1].bootstrap))
        assert [(b["id"], b["port"], b["controller"]) for b in c["brokers"]] == \
            [(i, cluster.brokers[i].port, i == controller) for i in (1, 2, 3)]
        assert c["controller_id"] == controller
        assert c["under_replicated_partitions"] == [] and c["offline_partitions"] == []
        text = ok("cluster", "-b", cluster.bootstrap)
        assert f"Controller: {controller}" in text and "Brokers: 3" in text
        assert "Under-replicated partitions: none" in text and "Offline partitions: none" in text
        # Leader, replicas and ISR of each partition, as ZooKeeper has them.
        (d,) = json.loads(ok("topics", "describe", topic, "--json", "-b", cluster.bootstrap))
        assert [(p["partition"], p["leader"], p["replicas"], sorted(p["isr"])) for p in d["partitions"]] == \
            [(0, 1, [1, 2, 3], [1, 2, 3]), (1, 2, [2, 3, 1], [1, 2, 3]), (2, 3, [3, 1, 2], [1, 2, 3])]
        assert d["replication_factor"] == 3
        assert [p["end_offset"] for p in d["partitions"]] == [10, 10, 10]

    def rest() -> None:  # the REST API of every broker tells the same story
        for b in cluster.brokers.values():
            view = _rest(b, "/cluster")
            assert [(x["id"], x["controller"]) for x in view["brokers"]] == [(i, i == controller) for i in (1, 2, 3)]
            assert view["under_replicated_partitions"] == [] and view["offline_partitions"] == []
            t = _rest(b, f"/topics/{topic}")
            assert t["replication_factor"] == 3 and t["under_replicated_partitions"] == 0
            assert [(p["leader"], p["replicas"], sorted(p["isr"]), p["under_replicated"])
                    for p in t["partition_list"]] == \
                [(1, [1, 2, 3], [1, 2, 3], False), (2, [2, 3, 1], [1, 2, 3], False),
                 (3, [3, 1, 2], [1, 2, 3], False)]

    eventually(cli)
    eventually(rest)


def test_broker_failure_is_visible_everywhere(cluster: Cluster, page: Any) -> None:  # noqa: F811
    """SIGKILL a follower: its partitions' leader reports them under-replicated and counts its ISR
    shrink, the follower's lag grows on the leader, the controller (and only it) counts the partition
    that lived on the dead broker alone (replication factor 1) as offline; `strom cluster`, `strom
    topics describe`, the REST API and the console show the same. Started again, it rejoins the ISR
    (IsrExpands) and all clears."""
    controller = cluster.controller()
    victim, leader = [b for b in (1, 2, 3) if b != controller]
    topic, solo = unique("failing"), unique("alone")
    # Led by `leader`, followed by the victim and the controller; and one on the victim alone.
    _create(cluster, topic, [[leader, victim, controller]])
    _create(cluster, solo, [[victim]])
    assert cluster.leader(topic, 0) == leader
    confluent_produce(cluster.bootstrap, topic, [{"value": b"before", "partition": 0}] * 10, {"acks": "all"})
    lag_labels = {"topic": topic, "partition": "0", "replica": str(victim)}
    lag_key = ("strom_fetcher_lag", frozenset(lag_labels.items()))
    wait_until(lambda: scrape(admin_url(cluster.brokers[leader])).get(lag_key) == 0, 20, interval=0.2,
               what="the victim caught up on the leader")
    before = _metrics(cluster)

    cluster.brokers[victim].kill()
    try:
        confluent_produce(cluster.bootstrap, topic, [{"value": b"after", "partition": 0}] * 25, {"acks": "1"})

        def shrunk() -> Samples | None:
            s = scrape(admin_url(cluster.brokers[leader]))
            return s if value(s, "strom_replica_manager_under_replicated_partitions") >= 1 else None

        on_leader = wait_until(shrunk, 15, interval=0.2, what="an under-replicated partition on the leader")
        assert value(on_leader, "strom_replica_manager_isr_shrinks_total") >= \
            value(before[leader], "strom_replica_manager_isr_shrinks_total") + 1
        assert value(on_leader, "strom_fetcher_lag", **lag_labels) >= 25  # the dead follower falls behind

        def offline_counted() -> dict[int, Samples] | None:
            m = _metrics(cluster)
            return m if value(m[controller], "strom_controller_offline_partitions_count") >= 1 else None

        m = wait_until(offline_counted, SESSION_TIMEOUT_MS / 1000 + 15, interval=0.3,
                       what="the controller counting the offline partition")
        assert value(m[leader], "strom_controller_offline_partitions_count") == 0  # only the controller counts
        assert sum(value(s, "strom_controller_active_controller_count") for s in m.values()) == 1

        def cli() -> None:
            # strom cluster: two live brokers; topic-0 under-replicated without the victim, solo-0 offline.
            c = json.loads(ok("cluster", "--json", "-b", cluster.brokers[leader].bootstrap))
            assert sorted(b["id"] for b in c["brokers"]) == sorted((leader, controller))
            assert c["controller_id"] == controller
            urp = {(p["topic"], p["partition"]): p for p in c["under_replicated_partitions"]}
            assert (topic, 0) in urp
            assert sorted(urp[(topic, 0)]["isr"]) == sorted((leader, controller))
            assert urp[(topic, 0)]["replicas"] == [leader, victim, controller]
            assert [(p["partition"], p["leader"], p["replicas"]) for p in c["offline_partitions"]
                    if p["topic"] == solo] == [(0, -1, [victim])]
            assert all(p["topic"] != solo for p in c["under_replicated_partitions"])  # offline, listed once
            text = ok("cluster", "-b", cluster.brokers[leader].bootstrap)
            assert "Under-replicated partitions:" in text and "Offline partitions: " in text
            assert topic in text and solo in text
            # kafka-topics' filters pick them out.
            bs = cluster.brokers[leader].bootstrap
            described = json.loads(ok("topics", "describe", topic, solo, "--under-replicated-partitions", "--json",
                                      "-b", bs))
            assert [(d["name"], [p["partition"] for p in d["partitions"]]) for d in described] == [(topic, [0])]
            described = json.loads(ok("topics", "describe", topic, solo, "--unavailable-partitions", "--json", "-b", bs))
            assert [(d["name"], [(p["partition"], p["leader"]) for p in d["partitions"]]) for d in described] == \
                [(solo, [(0, -1)])]

        def rest() -> None:
            # REST: the same from the controller's point of view.
            view = _rest(cluster.brokers[controller], "/cluster")
            assert sorted(b["id"] for b in view["brokers"]) == sorted((leader, controller))
            assert (topic, 0) in {(p["topic"], p["partition"]) for p in view["under_replicated_partitions"]}
            assert (solo, 0) in {(p["topic"], p["partition"]) for p in view["offline_partitions"]}
            (p0,) = _rest(cluster.brokers[leader], f"/topics/{topic}")["partition_list"]
            assert p0["under_replicated"] is True and p0["offline_replicas"] == [victim] and p0["leader"] == leader
            t = _rest(cluster.brokers[leader], f"/topics/{solo}")
            assert t["partition_list"][0]["offline"] is True and t["partition_list"][0]["leader"] == -1
            assert t["offline_partitions"] == 1 and t["under_replicated_partitions"] == 0

        eventually(cli)
        eventually(rest)

        # The console: the topic's partitions marked, the cluster page without the dead broker.
        from playwright.sync_api import expect

        page.goto(admin_url(cluster.brokers[leader]) + f"/#/topics/{topic}")
        row = page.locator('#t-parts tr[data-partition="0"]')
        expect(row).to_have_class("urp")
        expect(row).to_contain_text("under-replicated")
        expect(row.locator("td").nth(1)).to_have_text(str(leader))
        expect(row.locator("td").nth(2)).to_have_text(f"{leader}, {victim}, {controller}")
        expect(row.locator("s.down")).to_have_text(str(victim))  # the dead replica struck through
        shot(page, "cluster-topic-under-replicated")
        page.goto(admin_url(cluster.brokers[leader]) + f"/#/topics/{solo}")
        row = page.locator('#t-parts tr[data-partition="0"]')
        expect(row).to_have_class("offline")
        expect(row.locator("td").nth(1)).to_have_text("none")
        page.goto(admin_url(cluster.brokers[leader]) + "/#/cluster")
        expect(page.locator("#cl-brokers tbody tr")).to_have_count(2)
        expect(page.locator(f'#cl-brokers tr[data-broker="{controller}"]')).to_contain_text("controller")
        expect(page.locator(f'#cl-partitions tr[data-tp="{topic}-0"]')).to_contain_text("under-replicated")
        expect(page.locator(f'#cl-partitions tr[data-tp="{solo}-0"]')).to_contain_text("offline")
        shot(page, "cluster-failure")
    finally:
        cluster.start_broker(victim)

    # Back: the leader takes the victim into the ISR again, the offline partition gets its leader.
    cluster.wait_full_isr(topic, 1, timeout=60)
    cluster.wait_full_isr(solo, 1, timeout=60)

    def healed() -> dict[int, Samples] | None:
        m = _metrics(cluster)
        clear = all(value(s, "strom_replica_manager_under_replicated_partitions") == 0 for s in m.values()) and \
            value(m[controller], "strom_controller_offline_partitions_count") == 0 and len(m) == 3
        return m if clear else None

    m = wait_until(healed, 60, interval=0.5, what="nothing under-replicated or offline any more")
    assert value(m[leader], "strom_replica_manager_isr_expands_total") >= \
        value(before[leader], "strom_replica_manager_isr_expands_total") + 1
    assert sum(value(s, "strom_controller_active_controller_count") for s in m.values()) == 1

    def whole() -> None:
        c = json.loads(ok("cluster", "--json", "-b", cluster.bootstrap))
        assert len(c["brokers"]) == 3 and c["offline_partitions"] == [] and c["under_replicated_partitions"] == []

    eventually(whole)
