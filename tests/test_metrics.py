"""The admin listener: /metrics in Prometheus text (counters move by exactly what a test did), /healthz,
/readyz, an admin port of 0, a disabled or unbindable admin listener."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, free_port
from helpers import RawConnection, confluent_produce, create_topics, values_batch, wait_until
from prometheus_client.parser import text_string_to_metric_families

from strom.records import codec

ADMIN_RE = re.compile(r"admin listener ready on (http://[^\s]+)")
HTTP_TIMEOUT = 10

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def admin_url(broker: BrokerProcess) -> str:
    line = wait_until(lambda: next((m for m in map(ADMIN_RE.search, broker.log_lines) if m), None), 10,
                      what="the admin listener's log line")
    return line.group(1)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def scrape(url: str) -> Samples:
    status, content_type, text = get(url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when absent (a counter that has not moved yet is not exported)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def admin_broker(broker_factory: Any) -> BrokerProcess:
    b: BrokerProcess = broker_factory(overrides={"admin.listeners": "http://127.0.0.1:0"})
    return b


def test_counters_move_by_exactly_what_was_produced_and_fetched(admin_broker: BrokerProcess) -> None:
    url = admin_url(admin_broker)
    assert not url.endswith(":0")
    with RawConnection(admin_broker.bootstrap) as conn:
        assert int(conn.create_topic("metered", 2).error_code) == 0
        before = scrape(url)

        plain = values_batch([f"value-{i}".encode() for i in range(5)])
        gz = values_batch([b"x" * 100, b"y" * 100, b"z" * 100], codec=codec.GZIP)
        assert int(conn.produce("metered", 0, plain).error_code) == 0
        assert int(conn.produce("metered", 0, gz).error_code) == 0
        assert int(conn.produce("metered", 1, plain).error_code) == 0
        fetched = bytes(conn.fetch("metered", 0, 0).records or b"")
        assert len(fetched) == len(plain) + len(gz)
        # Errors: a partition that does not exist, an offset past the end.
        assert int(conn.produce("metered", 7, plain).error_code) == 3
        assert int(conn.fetch("metered", 1, 999).error_code) == 1

        after = scrape(url)
        topic = {"topic": "metered"}
        assert delta(before, after, "strom_topic_records_in_total", **topic) == 5 + 3 + 5
        assert delta(before, after, "strom_topic_bytes_in_total", **topic) == 2 * len(plain) + len(gz)
        assert delta(before, after, "strom_topic_records_out_total", **topic) == 5 + 3
        assert delta(before, after, "strom_topic_bytes_out_total", **topic) == len(fetched)

        assert delta(before, after, "strom_requests_total", api="Produce") == 4
        assert delta(before, after, "strom_requests_total", api="Fetch") == 2
        assert value(after, "strom_requests_total", api="CreateTopics") == 1
        assert delta(before, after, "strom_request_duration_seconds_count", api="Produce") == 4
        assert value(after, "strom_request_duration_seconds_bucket", api="Produce", le="+Inf") == \
            value(after, "strom_request_duration_seconds_count", api="Produce")
        assert value(after, "strom_request_duration_seconds_sum", api="Produce") > 0

        assert delta(before, after, "strom_request_errors_total", api="Produce",
                     error="UNKNOWN_TOPIC_OR_PARTITION", code="3") == 1
        assert delta(before, after, "strom_request_errors_total", api="Fetch",
                     error="OFFSET_OUT_OF_RANGE", code="1") == 1

        p0 = {"topic": "metered", "partition": "0"}
        assert value(after, "strom_log_end_offset", **p0) == 8
        assert value(after, "strom_high_watermark", **p0) == 8
        assert value(after, "strom_log_start_offset", **p0) == 0
        assert value(after, "strom_log_size_bytes", **p0) == len(plain) + len(gz)
        assert value(after, "strom_log_end_offset", topic="metered", partition="1") == 5
        assert value(after, "strom_connections") >= 1
        assert value(after, "strom_topics") >= 1
        assert value(after, "strom_partitions") >= 2
        assert value(after, "strom_broker_ready") == 1
        assert value(after, "process_cpu_seconds_total") > 0
        assert value(after, "process_resident_memory_bytes") > 1 << 20


def test_consumer_group_lag(admin_broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, TopicPartition

    url = admin_url(admin_broker)
    create_topics(admin_broker.bootstrap, {"lagging": 1})
    confluent_produce(admin_broker.bootstrap, "lagging", [{"value": f"v{i}".encode(), "partition": 0} for i in range(10)])
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "slow-readers",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.commit(offsets=[TopicPartition("lagging", 0, 4)], asynchronous=False)
    finally:
        consumer.close()
    labels = {"group": "slow-readers", "topic": "lagging", "partition": "0"}
    samples = wait_until(lambda: (s := scrape(url)) and value(s, "strom_consumer_group_lag", **labels) == 6 and s,
                         10, what="lag of 6 in /metrics")
    assert value(samples, "strom_consumer_group_committed_offset", **labels) == 4
    assert sum(v for (name, _), v in samples.items() if name == "strom_consumer_groups") >= 1
    assert value(samples, "strom_consumer_group_members", group="slow-readers") == 0


@pytest.mark.timeout(60)
def test_single_broker_replication_metrics(admin_broker: BrokerProcess) -> None:
    """Kafka's replica manager and controller metrics on a cluster of one: the broker is the active
    controller, leads every partition, nothing is under-replicated or offline, no ISR ever changes."""
    url = admin_url(admin_broker)
    create_topics(admin_broker.bootstrap, {"solo-a": 3, "solo-b": 2})
    s = scrape(url)
    partitions = value(s, "strom_partitions")
    assert partitions >= 5
    assert value(s, "strom_replica_manager_partition_count") == partitions
    assert value(s, "strom_replica_manager_leader_count") == partitions
    assert value(s, "strom_controller_active_controller_count") == 1
    for name in ("strom_replica_manager_under_replicated_partitions", "strom_controller_offline_partitions_count",
                 "strom_replica_manager_isr_shrinks_total", "strom_replica_manager_isr_expands_total"):
        assert (name, frozenset()) in s, f"{name} not exported"  # present at 0, so alerts can use it
        assert value(s, name) == 0, name
    assert not [k for k in s if k[0] == "strom_fetcher_lag"]  # no followers, no follower lag


def test_health_and_readiness(admin_broker: BrokerProcess) -> None:
    url = admin_url(admin_broker)
    assert get(url + "/healthz")[::2] == (200, "ok\n")
    assert get(url + "/readyz")[::2] == (200, "ready\n")


def test_readyz_is_503_until_the_broker_serves(tmp_path: Path) -> None:
    """In process: the admin server answers before the logs load; /readyz turns 200 once Kafka is served."""
    import aiohttp

    from strom.admin.server import attach
    from strom.broker.server import Broker
    from strom.config import BrokerConfig

    config = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                      "admin.listeners": "http://127.0.0.1:0"})

    async def scenario() -> None:
        broker = Broker(config)
        admin = attach(broker)
        await admin.start()  # what Broker.start does first
        try:
            (base,) = admin.addresses
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT)) as http:
                async with http.get(base + "/healthz") as r:
                    assert r.status == 200
                async with http.get(base + "/readyz") as r:
                    assert r.status == 503
                async with http.get(base + "/api/topics") as r:
                    assert r.status == 503
                async with http.get(base + "/metrics") as r:
                    text = await r.text()
                assert "strom_broker_ready 0.0" in text
                broker.services.remove(admin)  # already started
                await broker.start()
                async with http.get(base + "/readyz") as r:
                    assert r.status == 200
                await broker.stop()
                async with http.get(base + "/readyz") as r:
                    assert r.status == 503
        finally:
            await admin.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_admin_listener_can_be_disabled(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(overrides={"admin.listeners": ""})
    assert any("admin listener disabled" in line for line in b.log_lines)
    assert not any(ADMIN_RE.search(line) for line in b.log_lines)


def test_fixed_admin_port(broker_factory: Any) -> None:
    port = free_port()
    b: BrokerProcess = broker_factory(overrides={"admin.listeners": f"http://127.0.0.1:{port}"})
    assert admin_url(b) == f"http://127.0.0.1:{port}"
    start = time.monotonic()
    status, content_type, text = get(f"http://127.0.0.1:{port}/metrics",
                                     {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    assert time.monotonic() - start < HTTP_TIMEOUT
