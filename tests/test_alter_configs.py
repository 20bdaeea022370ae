"""AlterConfigs and IncrementalAlterConfigs through confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient and raw requests at every version: topic and dynamic broker configs, Kafka's error
codes, validate_only, persistence across restarts, and the effect on a live log (retention.ms)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import (
    RawConnection,
    confluent_admin,
    confluent_produce,
    create_topics,
    request_class,
    wait_until,
)

pytestmark = pytest.mark.timeout(90)

FAST = {"log.retention.check.interval.ms": "60000", "log.segment.delete.delay.ms": "0"}
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def cb(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = BrokerProcess(tmp_path_factory.mktemp("alter") / "data", overrides=FAST).start()
    yield b
    b.stop()


def describe(bs: str, rtype: str, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)
    (f,) = admin.describe_configs([ConfigResource(rtype, name)], request_timeout=15).values()
    return dict(f.result(timeout=20))


def raw_describe_default(bs: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs of the cluster-wide dynamic defaults (BROKER resource ""), which librdkafka and
    kafka-python cannot name (they route broker resources by a numeric id)."""
    req = request_class("describe_configs", 4, "DescribeConfigsRequest")
    res = request_class("describe_configs", 4, "DescribeConfigsResource")
    with RawConnection(bs) as conn:
        resp = conn.request(32, 4, req(resources=(res(resource_type=4, resource_name="", configuration_keys=None),)))
    (r,) = resp.results
    assert int(r.error_code) == 0, r
    return {c.name: (c.value, int(c.config_source)) for c in r.configs}


def raw_incremental_default(bs: str, name: str, op: int, value: str | None) -> int:
    with RawConnection(bs) as conn:
        ((code, _),) = _raw_alter(conn, "incremental_alter_configs", 44, 1,
                                  [(4, "", [{"name": name, "config_operation": op, "value": value}])])
    return code


def source(entry: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    return str(ConfigSource(entry.source).name)


def incremental(bs: str, rtype: str, name: str, *ops: tuple[str, str, str | None],
                validate_only: bool = False) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType[op]) for op, k, v in ops]
    admin = confluent_admin(bs)
    futures = admin.incremental_alter_configs(
        [ConfigResource(rtype, name, incremental_configs=entries)], validate_only=validate_only, request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)


def error_of(call: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def test_incremental_topic_configs_confluent(cb: BrokerProcess) -> None:
    from confluent_kafka import KafkaError

    bs = cb.bootstrap
    create_topics(bs, {"alt": 1}, {"retention.ms": "3600000"})
    incremental(bs, "topic", "alt", ("SET", "retention.ms", "7200000"), ("SET", "segment.bytes", "1048576"),
                ("APPEND", "cleanup.policy", "compact"))
    d = describe(bs, "topic", "alt")
    assert d["retention.ms"].value == "7200000" and source(d["retention.ms"]) == "DYNAMIC_TOPIC_CONFIG"
    assert d["segment.bytes"].value == "1048576"
    assert d["cleanup.policy"].value == "delete,compact"  # appended to the effective value
    incremental(bs, "topic", "alt", ("SUBTRACT", "cleanup.policy", "delete"), ("DELETE", "retention.ms", None))
    d = describe(bs, "topic", "alt")
    assert d["cleanup.policy"].value == "compact"
    assert d["retention.ms"].value == "604800000" and source(d["retention.ms"]) == "DEFAULT_CONFIG"
    # validate_only changes nothing.
    incremental(bs, "topic", "alt", ("SET", "segment.bytes", "2097152"), validate_only=True)
    assert describe(bs, "topic", "alt")["segment.bytes"].value == "1048576"
    # Kafka's error codes.
    err = error_of(lambda: incremental(bs, "topic", "alt", ("SET", "retention.ms", "soon")))
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    err = error_of(lambda: incremental(bs, "topic", "alt", ("SET", "no.such.config", "1")))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = error_of(lambda: incremental(bs, "topic", "alt", ("APPEND", "retention.ms", "5")))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = error_of(lambda: incremental(bs, "topic", "alt", ("SET", "min.compaction.lag.ms", "10"),
                                       ("SET", "max.compaction.lag.ms", "5")))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = error_of(lambda: incremental(bs, "topic", "nope", ("SET", "retention.ms", "1000")))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert describe(bs, "topic", "alt")["cleanup.policy"].value == "compact"  # failed changes left no trace


def test_legacy_alter_configs_replaces_the_set(cb: BrokerProcess) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigResource

    bs = cb.bootstrap
    create_topics(bs, {"legacy": 1}, {"retention.ms": "3600000", "segment.bytes": "1048576"})
    admin = confluent_admin(bs)
    (f,) = admin.alter_configs([ConfigResource("topic", "legacy", set_config={"retention.bytes": "123456"})],
                               request_timeout=15).values()
    f.result(timeout=20)
    d = describe(bs, "topic", "legacy")
    assert d["retention.bytes"].value == "123456"
    assert source(d["retention.ms"]) == "DEFAULT_CONFIG" and source(d["segment.bytes"]) == "DEFAULT_CONFIG"
    (f,) = admin.alter_configs([ConfigResource("topic", "legacy", set_config={"retention.bytes": "x"})],
                               request_timeout=15).values()
    err = error_of(lambda: f.result(timeout=20))
    assert err.code() == KafkaError.INVALID_CONFIG


def test_kafka_python_admin(cb: BrokerProcess) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    bs = cb.bootstrap
    create_topics(bs, {"kp": 1})
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        for incremental_api in (True, False):
            value = "111000" if incremental_api else "222000"
            result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", {"retention.ms": value})],
                                         incremental=incremental_api)
            assert result == {"topic": {"kp": "OK"}}, result
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
            assert described["topic"]["kp"]["retention.ms"]["value"] == value
        bad = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", {"retention.ms": "x"})],
                                  incremental=False)
        assert bad["topic"]["kp"].startswith("[Error 40] InvalidConfigurationError"), bad
        # Dynamic broker config through kafka-python, read back with confluent-kafka.
        assert admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                                   {"log.retention.bytes": "987654321"})]) == {"broker": {"0": "OK"}}
    finally:
        admin.close()
    d = describe(bs, "broker", "0")
    assert d["log.retention.bytes"].value == "987654321" and source(d["log.retention.bytes"]) == "DYNAMIC_BROKER_CONFIG"
    assert not d["log.retention.bytes"].is_read_only and d["num.partitions"].is_read_only
    topic = describe(bs, "topic", "kp")
    assert topic["retention.bytes"].value == "987654321"
    assert source(topic["retention.bytes"]) == "DYNAMIC_BROKER_CONFIG"
    incremental(bs, "broker", "0", ("DELETE", "log.retention.bytes", None))
    assert describe(bs, "topic", "kp")["retention.bytes"].value == "-1"


def test_dynamic_broker_configs_persist_and_apply(broker_factory: Any) -> None:
    from confluent_kafka import KafkaError

    b: BrokerProcess = broker_factory(overrides={"log.retention.check.interval.ms": "200",
                                                 "log.segment.delete.delay.ms": "0",
                                                 "log.segment.bytes": "1024"})
    bs = b.bootstrap
    create_topics(bs, {"dyn": 1})
    old = int(time.time() * 1000) - 3_600_000
    confluent_produce(bs, "dyn", [{"value": b"x" * 200, "partition": 0, "timestamp": old} for _ in range(30)],
                      {"linger.ms": 0, "batch.num.messages": 1})
    # A probe topic with a retention of 1 ms, written after "dyn": once a retention pass has deleted
    # its old segments, a whole pass (every log, "dyn" too) has run since "dyn" was written.
    create_topics(bs, {"dyn-probe": 1}, {"retention.ms": "1"})
    confluent_produce(bs, "dyn-probe", [{"value": b"x" * 200, "partition": 0, "timestamp": old} for _ in range(10)],
                      {"linger.ms": 0, "batch.num.messages": 1})
    wait_until(lambda: any("retention: deleted" in line and "dyn-probe-0" in line for line in b.log_lines), 10,
               what="a retention pass that deleted dyn-probe's segments")
    with RawConnection(bs) as conn:
        assert conn.list_offset("dyn", 0, -2)[0] == 0  # a week of retention by default: nothing goes
    # Cluster-wide default: every topic without an override now keeps 60 s, at once.
    assert raw_incremental_default(bs, "log.retention.ms", 0, "60000") == 0
    with RawConnection(bs) as conn:
        wait_until(lambda: conn.list_offset("dyn", 0, -2)[0] == 30, 10, what="the old segments to go")
    d = describe(bs, "topic", "dyn")
    assert (d["retention.ms"].value, source(d["retention.ms"])) == ("60000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert raw_describe_default(bs) == {"log.retention.ms": ("60000", 3)}  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert source(describe(bs, "broker", "0")["log.retention.ms"]) == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    incremental(bs, "broker", "0", ("SET", "log.cleaner.backoff.ms", "1234"))
    # Refused: static-only configs, another broker's id, bad values.
    err = error_of(lambda: incremental(bs, "broker", "0", ("SET", "num.partitions", "3")))
    assert err.code() == KafkaError.INVALID_CONFIG and "dynamically" in err.str()
    with RawConnection(bs) as conn:  # librdkafka would route this to broker 7, which is not there
        assert _raw_alter(conn, "incremental_alter_configs", 44, 1, [
            (4, "7", [{"name": "log.retention.ms", "config_operation": 0, "value": "1"}])]) == [(INVALID_REQUEST, "7")]
    assert raw_incremental_default(bs, "log.retention.bytes", 0, "big") == INVALID_CONFIG
    assert raw_incremental_default(bs, "num.partitions", 0, "2") == INVALID_CONFIG
    # Persisted: a restart (even a crash) keeps both levels.
    b.kill()
    b.start()
    d = describe(b.bootstrap, "broker", "0")
    assert (d["log.retention.ms"].value, source(d["log.retention.ms"])) == ("60000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert (d["log.cleaner.backoff.ms"].value, source(d["log.cleaner.backoff.ms"])) == ("1234",
                                                                                      "DYNAMIC_BROKER_CONFIG")
    assert source(d["log.segment.bytes"]) == "STATIC_BROKER_CONFIG"


def test_topic_retention_ms_applies_live(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(overrides={"log.retention.check.interval.ms": "200",
                                                 "log.segment.delete.delay.ms": "0"})
    bs = b.bootstrap
    create_topics(bs, {"live": 1}, {"segment.bytes": "1024"})
    old = int(time.time() * 1000) - 600_000
    confluent_produce(bs, "live", [{"value": b"o" * 200, "partition": 0, "timestamp": old} for _ in range(20)],
                      {"linger.ms": 0, "batch.num.messages": 1})
    confluent_produce(bs, "live", [{"value": b"n" * 200, "partition": 0} for _ in range(20)],
                      {"linger.ms": 0, "batch.num.messages": 1})
    segments_before = len(list((b.data_dir / "live-0").glob("*.log")))
    incremental(bs, "topic", "live", ("SET", "retention.ms", "300000"))
    with RawConnection(bs) as conn:
        wait_until(lambda: conn.list_offset("live", 0, -2)[0] > 0, 10, what="retention.ms to apply without a restart")
        start = conn.list_offset("live", 0, -2)[0]
        assert 15 <= start <= 20  # the old records' segments went; the segment holding offset 20 stayed
        assert [r.value for r in conn.fetch_records("live", 0, start)][-20:] == [b"n" * 200] * 20
    assert len(list((b.data_dir / "live-0").glob("*.log"))) < segments_before


def _raw_alter(conn: RawConnection, api: str, key: int, version: int, resources: list[tuple[int, str, list[Any]]],
               validate_only: bool = False) -> list[tuple[int, str]]:
    req = request_class(api, version, f"{''.join(w.title() for w in api.split('_'))}Request")
    res = request_class(api, version, "AlterConfigsResource")
    cfg = request_class(api, version, "AlterableConfig")
    body = req(validate_only=validate_only, resources=tuple(
        res(resource_type=t, resource_name=n, configs=tuple(cfg(**c) for c in configs)) for t, n, configs in resources))
    resp = conn.request(key, version, body)
    return [(int(r.error_code), r.resource_name) for r in resp.responses]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_raw_alter_configs_every_version(cb: BrokerProcess, version: int) -> None:
    topic = f"raw-ac-{version}"
    create_topics(cb.bootstrap, {topic: 1})
    with RawConnection(cb.bootstrap) as conn:
        ok = _raw_alter(conn, "alter_configs", 33, version,
                        [(2, topic, [{"name": "retention.ms", "value": "1000"}])])
        assert ok == [(0, topic)]
        bad = _raw_alter(conn, "alter_configs", 33, version, [
            (2, topic, [{"name": "retention.ms", "value": "1"}]), (2, topic, []),  # the same resource twice
            (2, "missing", []), (4, "9", []), (1, "x", []),
            (2, topic + "-none", [{"name": "retention.ms", "value": "1"}]),
        ])
        assert [code for code, _ in bad] == [INVALID_REQUEST, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION,
                                             INVALID_REQUEST, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION]
    assert describe(cb.bootstrap, "topic", topic)["retention.ms"].value == "1000"


@pytest.mark.parametrize("version", [0, 1])
def test_raw_incremental_alter_configs_every_version(cb: BrokerProcess, version: int) -> None:
    topic = f"raw-iac-{version}"
    create_topics(cb.bootstrap, {topic: 1})
    with RawConnection(cb.bootstrap) as conn:
        def one(*configs: dict[str, Any], validate_only: bool = False) -> int:
            ((code, _),) = _raw_alter(conn, "incremental_alter_configs", 44, version, [(2, topic, list(configs))],
                                      validate_only)
            return code

        assert one({"name": "retention.ms", "config_operation": 0, "value": "5000"}) == 0
        assert one({"name": "retention.ms", "config_operation": 0, "value": "1"},
                   {"name": "retention.ms", "config_operation": 1, "value": None}) == INVALID_REQUEST  # duplicate key
        assert one({"name": "retention.ms", "config_operation": 0, "value": None}) == INVALID_REQUEST
        assert one({"name": "retention.ms", "config_operation": 9, "value": "1"}) == INVALID_REQUEST
        assert one({"name": "retention.ms", "config_operation": 0, "value": "-7"}) == INVALID_CONFIG
        assert one({"name": "cleanup.policy", "config_operation": 2, "value": "compact"}, validate_only=True) == 0
    d = describe(cb.bootstrap, "topic", topic)
    assert d["retention.ms"].value == "5000" and d["cleanup.policy"].value == "delete"
