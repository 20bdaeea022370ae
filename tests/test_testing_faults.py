"""strom.testing's faults, each against confluent-kafka (librdkafka): restart (clean and SIGKILL),
pause/resume, injected errors (non-retriable and retriable, on the producer's and the consumer
group's APIs) and dropped connections. Each test gets its own broker from strom_broker_factory."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from helpers import ConnectionClosed, RawConnection

from strom.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(90)

Factory = Callable[..., EmbeddedBroker]


def producer(broker: EmbeddedBroker, **conf: Any) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all", "linger.ms": 0,
                     "message.timeout.ms": 30_000, **conf})


def consumer(broker: EmbeddedBroker, group: str, **conf: Any) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})


def produce_one(p: Producer, topic: str, value: bytes, timeout: float = 30.0) -> tuple[KafkaError | None, Any]:
    """Produce one record on its own (so one Produce request) and wait for its delivery report."""
    reports: list[tuple[KafkaError | None, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            p.produce(topic, value=value, on_delivery=lambda err, msg: reports.append((err, msg)))
            break
        except KafkaException as e:
            # After a topic error in a delivery report librdkafka refuses new records for that
            # topic locally until its next metadata refresh (a moment): not a delivery report.
            assert e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and time.monotonic() < deadline
            p.poll(0.05)
    while not reports:
        assert time.monotonic() < deadline, "no delivery report"
        p.poll(0.05)
    return reports[0]


def consume(c: Consumer, count: int, timeout: float = 30.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count:
        assert time.monotonic() < deadline, f"consumed {len(values)} of {count}"
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    return values


def injected(broker: EmbeddedBroker, since: int, api: str) -> int:
    """How many requests of ``api`` the broker answered with an injected error since ``since``."""
    return sum(f"answering {api} request" in line and "with injected" in line for line in broker.log_since(since))


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "sigkill"])
def test_restart_keeps_every_acknowledged_record(strom_broker_factory: Factory, hard: bool) -> None:
    broker = strom_broker_factory({"num.partitions": "3"})
    port, pid = broker.port, broker.pid
    broker.create_topic("ledger", 3)
    p = producer(broker, **{"enable.idempotence": True})
    acked: dict[bytes, tuple[int, int]] = {}

    def report(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())

    sent = 0

    def burst(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            p.produce("ledger", key=str(sent % 7).encode(), value=f"record-{sent}".encode(), on_delivery=report)
            sent += 1
            p.poll(0)

    burst(300)
    deadline = time.monotonic() + 20
    while len(acked) < 150:
        assert time.monotonic() < deadline
        p.poll(0.01)
    burst(300)  # in flight when the broker goes down: some acknowledged, some to be retried
    mark = broker.log_position
    broker.restart(hard=hard)
    burst(300)
    assert p.flush(30) == 0
    assert (broker.port, broker.bootstrap_servers) == (port, f"127.0.0.1:{port}")
    assert broker.pid != pid
    stored = {r.value: (r.partition, r.offset) for r in broker.records("ledger")}
    missing = {v: at for v, at in acked.items() if stored.get(v) != at}
    assert missing == {}
    assert len(acked) == sent == len(stored)  # every record acknowledged in the end, once (idempotence)
    assert any("unclean shutdown" in line for line in broker.log_since(mark)) == hard


def test_produce_to_paused_broker_times_out_then_succeeds_after_resume(strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    broker.create_topic("pausing")
    p = producer(broker, **{"message.timeout.ms": 1500, "request.timeout.ms": 1000})
    assert produce_one(p, "pausing", b"before")[0] is None
    with RawConnection(broker.bootstrap_servers, timeout=5) as raw:
        raw.api_versions()
        broker.pause()
        try:
            err, _ = produce_one(p, "pausing", b"while paused", timeout=10)
            assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT
            # The connection stays open, unanswered: no EOF, no reset, just silence.
            raw.sock.settimeout(0.5)
            corr = raw.send(18, 3, raw_api_versions_body())
            with pytest.raises(TimeoutError):
                raw.read_frame()
        finally:
            broker.resume()
        raw.sock.settimeout(5)
        try:
            frame = raw.read_frame()  # answered once the broker runs again
        except ConnectionClosed:
            pytest.fail("the paused broker's connection was closed")
        assert int.from_bytes(frame[:4], "big") == corr
    err, msg = produce_one(p, "pausing", b"after resume")
    assert err is None and msg.offset() >= 1


def raw_api_versions_body() -> Any:
    from helpers import request_class

    return request_class("api_versions", 3, "ApiVersionsRequest")(client_software_name="t",
                                                                   client_software_version="1")


def test_injected_topic_authorization_failed_reaches_the_delivery_report_count_times(
        strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    broker.create_topic("secured")
    p = producer(broker)
    assert produce_one(p, "secured", b"warm-up")[0] is None  # metadata known, connection up
    mark = broker.log_position
    broker.inject_error("Produce", "TOPIC_AUTHORIZATION_FAILED", count=3)
    codes = [produce_one(p, "secured", f"r{i}".encode())[0] for i in range(6)]
    assert [None if e is None else e.code() for e in codes] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3 + [None] * 3
    assert injected(broker, mark, "Produce") == 3  # each one a Produce response from the broker
    assert [r.value for r in broker.records("secured")] == [b"warm-up", b"r3", b"r4", b"r5"]


def test_injected_not_leader_or_follower_is_retried_through(strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    broker.create_topic("moving")
    p = producer(broker, **{"retry.backoff.ms": 10})
    assert produce_one(p, "moving", b"first")[0] is None
    mark = broker.log_position
    broker.inject_error("Produce", "NOT_LEADER_OR_FOLLOWER", count=3)
    err, msg = produce_one(p, "moving", b"second")
    assert err is None and msg.offset() == 1
    assert injected(broker, mark, "Produce") == 3  # the client did see the three errors
    assert [r.value for r in broker.records("moving")] == [b"first", b"second"]


@pytest.mark.timeout(200)
def test_consumer_group_carries_on_through_injected_group_and_fetch_errors(strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    broker.create_topic("grouped", 2)
    broker.produce("grouped", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)])
    mark = broker.log_position
    broker.inject_error("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    broker.inject_error("JoinGroup", "COORDINATOR_NOT_AVAILABLE", count=1)
    broker.inject_error("Fetch", "NOT_LEADER_OR_FOLLOWER", count=2)
    # After the injected OffsetCommit error librdkafka marks the coordinator dead, and its retried
    # commit can chase the coordinator connection's address changes for tens of seconds (each round
    # a FindCoordinator queued behind the consumer's long-polling Fetch), without heartbeats: a
    # session long enough that the member outlives that.
    c = consumer(broker, "survivors", **{"retry.backoff.ms": 10, "session.timeout.ms": 150_000})
    try:
        c.subscribe(["grouped"])
        assert sorted(consume(c, 20)) == sorted(f"v{i}".encode() for i in range(20))
        broker.inject_error("OffsetCommit", "COORDINATOR_NOT_AVAILABLE", count=1)
        try:
            c.commit(asynchronous=False)
        except KafkaException as e:  # the first commit may surface the error ...
            assert e.args[0].code() == KafkaError.COORDINATOR_NOT_AVAILABLE
            c.commit(asynchronous=False)  # ... and the next one goes through
    finally:
        c.close()
    for api, count in [("FindCoordinator", 2), ("JoinGroup", 1), ("Fetch", 2), ("OffsetCommit", 1)]:
        assert injected(broker, mark, api) == count, api
    assert sum(broker.committed("survivors", "grouped").values()) == 20


def test_clients_carry_on_after_drop_connections(strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    broker.create_topic("dropped")
    # Idempotent: a producer without it may write a record twice when it retries a request whose
    # connection went (Kafka's at-least-once), and this test counts exactly once.
    p = producer(broker, **{"enable.idempotence": True})
    c = consumer(broker, "droppers")
    try:
        c.subscribe(["dropped"])
        assert produce_one(p, "dropped", b"before")[0] is None
        assert consume(c, 1) == [b"before"]
        assert broker.drop_connections() >= 3  # the producer's, the consumer's and its coordinator's
        for i in range(5):
            assert produce_one(p, "dropped", f"after-{i}".encode())[0] is None
        assert consume(c, 5) == [f"after-{i}".encode() for i in range(5)]
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert broker.committed("droppers", "dropped") == {0: 6}


def test_inject_error_refuses_unknown_names(strom_broker_factory: Factory) -> None:
    broker = strom_broker_factory()
    with pytest.raises(ValueError, match="unknown api 'Prodce'.*Produce"):
        broker.inject_error("Prodce", "NOT_LEADER_OR_FOLLOWER")
    with pytest.raises(ValueError, match="unknown error 'NOT_A_LEADER'"):
        broker.inject_error("Produce", "NOT_A_LEADER")
    with pytest.raises(ValueError, match="NONE is no error"):
        broker.inject_error("Produce", "NONE")
    with pytest.raises(ValueError, match="count must be at least 1"):
        broker.inject_error("Produce", "NOT_LEADER_OR_FOLLOWER", count=0)
    broker.create_topic("still-fine")  # nothing was queued
    assert broker.produce("still-fine", [b"x"]) == [(0, 0)]
