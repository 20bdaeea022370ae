"""Broker and topic configuration with Kafka's property names, types and defaults.

    config = BrokerConfig.load(Path("server.properties"), ["log.dirs=/data"])
    config.log_retention_ms, config.listeners[0].port, config.describe()
    validate_topic_configs({"retention.ms": "60000"}); log_config_for(config, topic_overrides)

A bad value raises ConfigError, whose text is one line: "invalid config <key>: <reason>".
See docs/configuration.md for the keys.
"""

from ._defs import (
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Importance,
    no_effect_warnings,
)
from .broker import BrokerConfig, Listener, parse_listeners, read_properties
from .definitions import BROKER_CONFIGS, BROKER_DEFS, DYNAMIC_BROKER_CONFIGS, TOPIC_CONFIGS, TOPIC_DEFS
from .dynamic import check_dynamic_names, with_dynamic_configs
from .live import LiveConfig
from .topic import (
    describe_topic_config,
    log_config_for,
    parse_topic_configs,
    topic_config_defaults,
    topic_config_values,
    validate_topic_configs,
)

__all__ = [
    "BROKER_CONFIGS",
    "BROKER_DEFS",
    "DYNAMIC_BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "TOPIC_DEFS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Importance",
    "Listener",
    "LiveConfig",
    "check_dynamic_names",
    "no_effect_warnings",
    "describe_topic_config",
    "log_config_for",
    "parse_listeners",
    "parse_topic_configs",
    "read_properties",
    "topic_config_defaults",
    "topic_config_values",
    "validate_topic_configs",
    "with_dynamic_configs",
]
