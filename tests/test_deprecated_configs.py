"""Configs Kafka 3.x deprecated but still accepts (message.format.version, log.message.format.version,
inter.broker.protocol.version) are accepted by CreateTopics, AlterConfigs, IncrementalAlterConfigs and
server.properties, described back by DescribeConfigs, change nothing (records round-trip as before), and
each setting logs one warning naming the key. An unknown key is still refused with INVALID_CONFIG.
Everything goes through confluent-kafka's AdminClient, as a Kafka user's tools would."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_admin, confluent_consume, confluent_produce, create_topics, wait_until

pytestmark = pytest.mark.timeout(90)

DEPRECATED = "is deprecated and has no effect"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("deprecated") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def describe(bs: str, rtype: str, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)  # held until the answer: a collected client cancels its requests
    (f,) = admin.describe_configs([ConfigResource(rtype, name)], request_timeout=15).values()
    return dict(f.result(timeout=20))


def source(entry: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    return str(ConfigSource(entry.source).name)


def warnings_for(b: BrokerProcess, key: str, where: str) -> list[str]:
    return [line for line in list(b.log_lines) if f"{where}: config {key}=" in line and DEPRECATED in line]


def round_trip(bs: str, topic: str, n: int = 20) -> None:
    """Records written with compression and headers come back exactly: the config changed nothing."""
    records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode() * (i + 1), "headers": [("h", b"x")]}
               for i in range(n)]
    delivered = confluent_produce(bs, topic, records, {"compression.type": "lz4", "acks": "all"})
    start = min(d.offset for d in delivered)
    got = confluent_consume(bs, topic, [0], n, start=start)
    assert [(m.key(), m.value(), m.headers()) for m in got] == [(r["key"], r["value"], r["headers"])
                                                                 for r in records]


def kafka_error(call: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def test_create_topics_accepts_message_format_version(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    bs = broker.bootstrap
    create_topics(bs, {"mfv-create": 1}, {"message.format.version": "0.10.2", "retention.ms": "3600000"})
    d = describe(bs, "topic", "mfv-create")
    assert d["message.format.version"].value == "0.10.2"
    assert source(d["message.format.version"]) == "DYNAMIC_TOPIC_CONFIG"
    assert d["retention.ms"].value == "3600000"
    round_trip(bs, "mfv-create")
    wait_until(lambda: warnings_for(broker, "message.format.version", "topic mfv-create"), 10, what="the warning")
    assert len(warnings_for(broker, "message.format.version", "topic mfv-create")) == 1

    # Without the override the topic reports Kafka 3.x's default, from the broker's synonym.
    create_topics(bs, {"mfv-default": 1})
    d = describe(bs, "topic", "mfv-default")
    assert d["message.format.version"].value == "3.0-IV1" and source(d["message.format.version"]) == "DEFAULT_CONFIG"
    assert not warnings_for(broker, "message.format.version", "topic mfv-default")

    admin = confluent_admin(bs)
    for config in ({"no.such.config": "1"}, {"message.format.version": "banana"}):
        futures = admin.create_topics([NewTopic("mfv-refused", 1, 1, config=config)], request_timeout=15)
        err = kafka_error(lambda f=futures["mfv-refused"]: f.result(timeout=20))
        assert err.code() == KafkaError.INVALID_CONFIG, (config, err)
        assert next(iter(config)) in err.str()
    assert "mfv-refused" not in admin.list_topics(timeout=10).topics


def test_alter_configs_accept_message_format_version(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    bs = broker.bootstrap
    create_topics(bs, {"mfv-alter": 1})
    admin = confluent_admin(bs)

    # AlterConfigs (the legacy whole-set API, still used by older tools)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent-kafka's own deprecation of alter_configs
        (f,) = admin.alter_configs([ConfigResource("topic", "mfv-alter", set_config={
            "message.format.version": "2.8", "segment.bytes": "1048576"})], request_timeout=15).values()
    f.result(timeout=20)
    d = describe(bs, "topic", "mfv-alter")
    assert (d["message.format.version"].value, d["segment.bytes"].value) == ("2.8", "1048576")
    wait_until(lambda: warnings_for(broker, "message.format.version", "topic mfv-alter"), 10, what="the warning")
    round_trip(bs, "mfv-alter")

    def incremental(*ops: tuple[str, str, str | None]) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType[op]) for op, k, v in ops]
        (f,) = admin.incremental_alter_configs([ConfigResource("topic", "mfv-alter", incremental_configs=entries)],
                                               request_timeout=15).values()
        f.result(timeout=20)

    # IncrementalAlterConfigs: set it, change another key (no second warning for an unchanged value), delete it
    incremental(("SET", "message.format.version", "3.0"))
    assert describe(bs, "topic", "mfv-alter")["message.format.version"].value == "3.0"
    wait_until(lambda: len(warnings_for(broker, "message.format.version", "topic mfv-alter")) == 2, 10,
               what="the second warning")
    incremental(("SET", "retention.ms", "7200000"))
    d = describe(bs, "topic", "mfv-alter")
    assert (d["message.format.version"].value, d["retention.ms"].value) == ("3.0", "7200000")
    round_trip(bs, "mfv-alter")
    incremental(("DELETE", "message.format.version", None))
    d = describe(bs, "topic", "mfv-alter")
    assert d["message.format.version"].value == "3.0-IV1" and source(d["message.format.version"]) == "DEFAULT_CONFIG"
    assert len(warnings_for(broker, "message.format.version", "topic mfv-alter")) == 2

    # Unknown keys and bad values are refused, and leave no trace.
    for ops in ((("SET", "no.such.config", "1"),), (("SET", "message.format.version", "latest"),)):
        err = kafka_error(lambda ops=ops: incremental(*ops))
        assert err.code() == KafkaError.INVALID_CONFIG, (ops, err)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        (f,) = admin.alter_configs([ConfigResource("topic", "mfv-alter", set_config={"no.such.config": "1"})],
                                   request_timeout=15).values()
    err = kafka_error(lambda: f.result(timeout=20))
    assert err.code() == KafkaError.INVALID_CONFIG and "no.such.config" in err.str()
    assert describe(bs, "topic", "mfv-alter")["retention.ms"].value == "7200000"


def test_deprecated_broker_configs(tmp_path: Any) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    props = tmp_path / "server.properties"
    # As left in a server.properties from a Kafka 2.x rolling upgrade.
    props.write_text("inter.broker.protocol.version=2.8\nlog.message.format.version=2.8\n")
    b = BrokerProcess(tmp_path / "data", config_file=props).start()
    try:
        bs = b.bootstrap
        for key in ("inter.broker.protocol.version", "log.message.format.version"):
            assert len(warnings_for(b, key, "broker")) == 1, b.log_text()
        assert "isn't a known config" not in b.log_text()
        d = describe(bs, "broker", "0")
        for key in ("inter.broker.protocol.version", "log.message.format.version"):
            assert d[key].value == "2.8" and source(d[key]) == "STATIC_BROKER_CONFIG", key
        # A topic's default follows the broker's, as for any topic config with a broker synonym.
        create_topics(bs, {"mfv-broker": 1})
        t = describe(bs, "topic", "mfv-broker")["message.format.version"]
        assert t.value == "2.8" and source(t) == "STATIC_BROKER_CONFIG"
        round_trip(bs, "mfv-broker")
        # As in Kafka (DynamicLogConfig leaves it out), it cannot be changed at runtime.
        admin = confluent_admin(bs)
        entry = ConfigEntry("log.message.format.version", "3.0", incremental_operation=AlterConfigOpType.SET)
        (f,) = admin.incremental_alter_configs([ConfigResource("broker", "0", incremental_configs=[entry])],
                                               request_timeout=15).values()
        err = kafka_error(lambda: f.result(timeout=20))
        assert err.code() == KafkaError.INVALID_CONFIG and "dynamically" in err.str()
    finally:
        b.stop()


def test_definitions() -> None:
    from strom.config import (
        BROKER_CONFIGS,
        DYNAMIC_BROKER_CONFIGS,
        TOPIC_CONFIGS,
        TOPIC_DEFS,
        ConfigError,
        no_effect_warnings,
        validate_topic_configs,
    )

    deprecated = {d.name for d in (*BROKER_CONFIGS, *TOPIC_CONFIGS) if d.deprecated is not None}
    assert deprecated == {"message.format.version", "log.message.format.version", "inter.broker.protocol.version"}
    assert all(d.ignored for d in (*BROKER_CONFIGS, *TOPIC_CONFIGS) if d.deprecated is not None)
    assert not deprecated & DYNAMIC_BROKER_CONFIGS
    for good in ("0.8.2", "0.8.2.2", "0.10.2-IV0", "2.8", "3.0-IV1"):
        validate_topic_configs({"message.format.version": good})
    for bad in ("3", "3.0-iv1", "latest", ""):
        with pytest.raises(ConfigError, match="message.format.version"):
            validate_topic_configs({"message.format.version": bad})
    lines = no_effect_warnings({"message.format.version": "2.8", "retention.ms": "1", "preallocate": "true",
                                "message.downconversion.enable": "true"}, TOPIC_DEFS, "topic t")
    assert len(lines) == 2 and lines[0].startswith("topic t: config message.format.version=2.8 " + DEPRECATED)
    # An ignored key says so when set to anything but its default (which is what strom does anyway).
    assert lines[1].startswith("topic t: config preallocate=true is accepted but strom does not act on it")
