"""Kafka's broker keys strom has no feature for: a broker started with some of them reports each with its
value and source; AlterConfigs and IncrementalAlterConfigs take the ones Kafka changes at runtime
(sasl.kerberos.min.time.before.relogin, per broker) and refuse the read-only ones as Kafka does; a value
strom could not honour stops the broker with one line naming the key. Through confluent-kafka's
AdminClient and raw requests, against the broker as a subprocess."""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, confluent_admin, request_class

pytestmark = pytest.mark.timeout(120)

RELOGIN = "sasl.kerberos.min.time.before.relogin"
# Kafka keys strom has no feature for, at values strom can store (inert, or Kafka's default).
KAFKA_ONLY = {
    "sasl.kerberos.service.name": "kafka",  # Kerberos: not offered, so inert
    "remote.log.manager.thread.pool.size": "4",  # tiered storage, which is off: inert
    "controller.quorum.election.timeout.ms": "1500",  # KRaft tuning: inert
    "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter",  # Kafka's default
    "compression.gzip.level": "-1",  # Kafka's default
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kafka-keys") / "data", overrides=KAFKA_ONLY).start()
    try:
        yield b
    finally:
        b.stop()


def describe(bs: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)  # held until the answer: a collected client cancels its requests
    (f,) = admin.describe_configs([ConfigResource("broker", "0")], request_timeout=15).values()
    return dict(f.result(timeout=20))


def source(entry: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    return str(ConfigSource(entry.source).name)


def kafka_error(call: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def alter(bs: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent-kafka's own deprecation of alter_configs
        (f,) = admin.alter_configs([ConfigResource("broker", "0", set_config=configs)], request_timeout=15).values()
    f.result(timeout=20)


def incremental(bs: str, name: str, op: str, value: str | None) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType[op])
    admin = confluent_admin(bs)
    (f,) = admin.incremental_alter_configs([ConfigResource("broker", "0", incremental_configs=[entry])],
                                           request_timeout=15).values()
    f.result(timeout=20)


def raw_incremental(bs: str, resource_name: str, name: str, value: str) -> tuple[int, str | None]:
    req = request_class("incremental_alter_configs", 1, "IncrementalAlterConfigsRequest")
    res = request_class("incremental_alter_configs", 1, "AlterConfigsResource")
    cfg = request_class("incremental_alter_configs", 1, "AlterableConfig")
    with RawConnection(bs) as conn:
        resp = conn.request(44, 1, req(resources=(res(resource_type=4, resource_name=resource_name, configs=(
            cfg(name=name, config_operation=0, value=value),)),), validate_only=False))
    (r,) = resp.responses
    return int(r.error_code), r.error_message


def test_started_with_kafka_only_keys_reports_them(broker: BrokerProcess) -> None:
    d = describe(broker.bootstrap)
    for key, value in KAFKA_ONLY.items():
        assert d[key].value == value, key
        assert source(d[key]) == "STATIC_BROKER_CONFIG", key
    # One not set: Kafka's default, from DEFAULT_CONFIG; Kafka's read-only and dynamic flags.
    assert (d[RELOGIN].value, source(d[RELOGIN]), d[RELOGIN].is_read_only) == ("60000", "DEFAULT_CONFIG", False)
    assert d["remote.log.storage.system.enable"].value == "false"
    assert d["remote.log.storage.system.enable"].is_read_only
    # Known keys: no "isn't a known config" warning; a changed inert one logs its one warning.
    log = broker.log_text()
    assert "isn't a known config" not in log
    assert "config sasl.kerberos.service.name=kafka is accepted but strom does not act on it" in log
    assert "config metric.reporters=" not in log  # Kafka's default: nothing to say


def test_alter_configs_sets_a_dynamic_kafka_key(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    alter(bs, {RELOGIN: "58000"})
    d = describe(bs)
    assert (d[RELOGIN].value, source(d[RELOGIN])) == ("58000", "DYNAMIC_BROKER_CONFIG")
    incremental(bs, RELOGIN, "SET", "61000")
    d = describe(bs)
    assert (d[RELOGIN].value, source(d[RELOGIN])) == ("61000", "DYNAMIC_BROKER_CONFIG")
    incremental(bs, RELOGIN, "DELETE", None)
    d = describe(bs)
    assert (d[RELOGIN].value, source(d[RELOGIN])) == ("60000", "DEFAULT_CONFIG")


def test_kafka_rules_for_changing_them_at_runtime(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError

    bs = broker.bootstrap
    # Read-only in Kafka: refused as Kafka refuses it.
    err = kafka_error(lambda: incremental(bs, "remote.log.manager.thread.pool.size", "SET", "8"))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "cannot be updated dynamically" in err.str()
    # Per-broker in Kafka: not at the cluster-wide default level.
    code, message = raw_incremental(bs, "", RELOGIN, "58000")
    assert code == KafkaError.INVALID_CONFIG and message is not None and RELOGIN in message
    # Dynamic, but a value strom could not honour: refused like at start.
    err = kafka_error(lambda: incremental(bs, "metric.reporters", "SET", "com.example.Reporter"))
    assert err.code() == KafkaError.INVALID_CONFIG and "cannot be honoured" in err.str()
    # Neither Kafka's nor strom's: refused as before.
    err = kafka_error(lambda: incremental(bs, "no.such.broker.config", "SET", "1"))
    assert err.code() == KafkaError.INVALID_CONFIG
    d = describe(bs)
    assert d["remote.log.manager.thread.pool.size"].value == "4"
    assert d["metric.reporters"].value == "org.apache.kafka.common.metrics.JmxReporter"


@pytest.mark.parametrize(("key", "value"), [
    ("process.roles", "broker,controller"),
    ("remote.log.storage.system.enable", "true"),
    ("metric.reporters", "com.example.Reporter"),
    ("group.share.enable", "false"),  # share groups are always on: Kafka's default (false) cannot be honoured
])
def test_a_value_strom_cannot_honour_stops_the_broker(tmp_path: Path, key: str, value: str) -> None:
    proc = subprocess.run(BrokerProcess(tmp_path / "data", overrides={key: value}).command(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[-1].startswith(f"strom: invalid config {key}: "), proc.stdout
    assert sum(key in line for line in lines) == 1, proc.stdout
