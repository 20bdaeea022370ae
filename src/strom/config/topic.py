"""Topic-level configs: validation, effective values over the broker's defaults, describe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._defs import (
    LONG_MAX,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    Value,
    format_value,
    snake,
)
from .definitions import BROKER_DEFS, TOPIC_CONFIGS, TOPIC_DEFS

if TYPE_CHECKING:
    from strom.storage.log import LogConfig

    from .broker import BrokerConfig


def _flush_ms(b: BrokerConfig) -> int:
    # Kafka: log.flush.interval.ms, else log.flush.scheduler.interval.ms.
    return b.log_flush_interval_ms if b.log_flush_interval_ms is not None else b.log_flush_scheduler_interval_ms


# Topic configs whose broker default combines several properties (precedence applied in BrokerConfig).
_DERIVED_DEFAULTS: dict[str, Callable[[BrokerConfig], Value]] = {
    "retention.ms": lambda b: b.log_retention_ms,
    "segment.ms": lambda b: b.log_roll_ms,
    "segment.jitter.ms": lambda b: b.log_roll_jitter_ms,
    "flush.ms": _flush_ms,
}


def _default_value(broker: BrokerConfig, d: ConfigDef) -> Value:
    derive = _DERIVED_DEFAULTS.get(d.name)
    if derive is not None:
        return derive(broker)
    if d.synonyms:
        return broker.get(d.synonyms[0])
    return d.parsed_default()


def _default_source(broker: BrokerConfig, d: ConfigDef) -> ConfigSource:
    # The first synonym set (they are listed by precedence) decides: static or dynamic broker config.
    for s in d.synonyms:
        if broker.is_set(s):
            return broker.source_of(s)
    return ConfigSource.DEFAULT_CONFIG


def topic_config_defaults(broker: BrokerConfig) -> dict[str, str]:
    """Topic config name -> the effective broker default, as text (what a new topic gets)."""
    out: dict[str, str] = {}
    for d in TOPIC_CONFIGS:
        text = format_value(_default_value(broker, d))
        out[d.name] = "" if text is None else text
    return out


def parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Value]:
    """Parse and validate topic overrides; None values (a reset to default) are dropped."""
    out: dict[str, Value] = {}
    for name, text in configs.items():
        d = TOPIC_DEFS.get(name)
        if d is None:
            raise ConfigError(name, "unknown topic config")
        if text is not None:
            out[name] = d.parse(text)
    return out


def validate_topic_configs(configs: Mapping[str, str | None], broker: BrokerConfig | None = None) -> None:
    """Raise ConfigError for an unknown name or a bad value (Kafka's INVALID_CONFIG).

    With `broker`, combinations are also checked against the broker's defaults (e.g. a topic
    min.compaction.lag.ms above the broker's max).
    """
    given = parse_topic_configs(configs)
    values = topic_config_values(broker, given) if broker is not None else given
    lo, hi = values.get("min.compaction.lag.ms"), values.get("max.compaction.lag.ms")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        key = "min.compaction.lag.ms" if "min.compaction.lag.ms" in given else "max.compaction.lag.ms"
        raise ConfigError(key, f"min.compaction.lag.ms ({lo}) must not be greater than max.compaction.lag.ms ({hi})")


def topic_config_values(broker: BrokerConfig, overrides: Mapping[str, Any]) -> dict[str, Value]:
    """Effective parsed value of every topic config: the override, else the broker default.

    `overrides` may hold text (validated here) or values already parsed by parse_topic_configs.
    """
    out = {d.name: _default_value(broker, d) for d in TOPIC_CONFIGS}
    for name, v in overrides.items():
        if v is None:
            continue
        d = TOPIC_DEFS.get(name)
        if d is None:
            raise ConfigError(name, "unknown topic config")
        out[name] = d.parse(v) if isinstance(v, str) else v  # parsing is idempotent on str
    return out


def describe_topic_config(broker: BrokerConfig, overrides: Mapping[str, str | None]) -> list[ConfigEntry]:
    """Every topic config for DescribeConfigs on a TOPIC resource, sorted by name.

    Overrides report DYNAMIC_TOPIC_CONFIG; the rest report where the broker default came from
    (DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG when AlterConfigs set a synonym,
    STATIC_BROKER_CONFIG when server.properties or an override did, else DEFAULT_CONFIG). Synonyms list every level, most specific first, as Kafka does.
    """
    out = []
    for d in sorted(TOPIC_CONFIGS, key=lambda c: c.name):
        synonyms: list[ConfigSynonym] = []
        override = overrides.get(d.name)
        if override is not None:
            synonyms.append(ConfigSynonym(d.name, override, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for s in d.synonyms:
            for source, text in broker.layers(s):
                synonyms.append(ConfigSynonym(s, format_value(BROKER_DEFS[s].parse(text)), source))
        for s in d.synonyms:
            default = BROKER_DEFS[s].default
            if default is not None:
                synonyms.append(ConfigSynonym(s, default, ConfigSource.DEFAULT_CONFIG))
        if override is not None:
            value: str | None = override
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value = format_value(_default_value(broker, d))
            source = _default_source(broker, d)
        out.append(
            ConfigEntry(
                name=d.name,
                value=value,
                source=source,
                read_only=False,
                sensitive=False,
                type=d.type,
                doc=d.doc,
                synonyms=tuple(synonyms),
            )
        )
    return out


# LogConfig attribute -> topic config, where the name is not simply snake_case.
_LOG_CONFIG_NAMES = {"flush_interval_messages": "flush.messages", "flush_interval_ms": "flush.ms"}


def log_config_for(broker: BrokerConfig, overrides: Mapping[str, str | None]) -> LogConfig:
    """The storage layer's LogConfig for a topic with these overrides (validated)."""
    from strom.storage.log import LogConfig

    values = topic_config_values(broker, parse_topic_configs(overrides))
    by_attr = {snake(name): name for name in TOPIC_DEFS}
    by_attr.update(_LOG_CONFIG_NAMES)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(LogConfig):
        name = by_attr.get(f.name)
        if name is None:
            continue  # a storage-only setting with its own default
        v = values[name]
        if isinstance(v, list):
            v = ",".join(v)  # cleanup.policy: "delete", "compact" or "compact,delete"
        if name == "flush.ms" and isinstance(v, int) and v >= LONG_MAX:
            v = None  # Long.MAX_VALUE is Kafka's "never flush on time"
        kwargs[f.name] = v
    return LogConfig(**kwargs)
