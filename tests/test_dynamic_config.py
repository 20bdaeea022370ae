"""Dynamic broker configs at the config level: precedence over static values, sources and synonyms in
describe (broker and topic resources), and validation of what may change at runtime."""

from __future__ import annotations

import pytest

from strom.config import (
    BrokerConfig,
    ConfigError,
    ConfigSource,
    describe_topic_config,
    log_config_for,
    with_dynamic_configs,
)


def test_precedence_and_sources() -> None:
    static = BrokerConfig.load(None, ["log.retention.hours=2", "log.segment.bytes=1048576"])
    c = with_dynamic_configs(static, {"log.retention.ms": "60000", "log.segment.bytes": "2097152"},
                             {"log.segment.bytes": "4194304"})
    assert c.log_retention_ms == 60000  # dynamic ms over static hours
    assert c.log_segment_bytes == 4194304  # per-broker over cluster default over static
    assert c.source_of("log.segment.bytes") is ConfigSource.DYNAMIC_BROKER_CONFIG
    assert c.source_of("log.retention.ms") is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert c.source_of("log.retention.hours") is ConfigSource.STATIC_BROKER_CONFIG
    assert c.source_of("num.partitions") is ConfigSource.DEFAULT_CONFIG
    entries = {e.name: e for e in c.describe()}
    assert [(s.value, s.source) for s in entries["log.segment.bytes"].synonyms] == [
        ("4194304", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("2097152", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("1048576", ConfigSource.STATIC_BROKER_CONFIG),
        ("1073741824", ConfigSource.DEFAULT_CONFIG),
    ]
    topic = {e.name: e for e in describe_topic_config(c, {})}
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == ("60000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert (topic["segment.bytes"].value, topic["segment.bytes"].source) == ("4194304", "DYNAMIC_BROKER_CONFIG")
    assert log_config_for(c, {}).retention_ms == 60000
    assert log_config_for(c, {"retention.ms": "5"}).retention_ms == 5
    # Replacing the layers drops what they had; the static values come back.
    back = with_dynamic_configs(c, {}, {})
    assert (back.log_retention_ms, back.log_segment_bytes) == (2 * 3600 * 1000, 1048576)
    assert back.source_of("log.segment.bytes") is ConfigSource.STATIC_BROKER_CONFIG


@pytest.mark.parametrize(
    ("default", "per_broker", "key"),
    [
        ({"num.partitions": "3"}, {}, "num.partitions"),  # static only
        ({}, {"no.such.config": "1"}, "no.such.config"),
        ({"log.retention.bytes": "lots"}, {}, "log.retention.bytes"),
        ({"log.cleaner.min.compaction.lag.ms": "10"}, {"log.cleaner.max.compaction.lag.ms": "5"},
         "log.cleaner.min.compaction.lag.ms"),
    ],
)
def test_invalid_dynamic_configs(default: dict[str, str], per_broker: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        with_dynamic_configs(BrokerConfig.defaults(), default, per_broker)
    assert e.value.key == key
