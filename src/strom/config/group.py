"""Configs of a GROUP resource (KIP-848/932: IncrementalAlterConfigs and DescribeConfigs on a group),
those share groups read: ``share.auto.offset.reset`` (where a share group new to a partition starts:
latest, the default, or earliest) and ``share.record.lock.duration.ms`` (the group's acquisition
lock, within the broker's group.share.min/max.record.lock.duration.ms). Anything else is refused
with INVALID_CONFIG, as Kafka refuses an unknown group config."""

from __future__ import annotations

from collections.abc import Mapping

from ._defs import ConfigDef, ConfigEntry, ConfigError, ConfigSource, ConfigType, OneOf
from .broker import BrokerConfig

GROUP_CONFIGS = (
    ConfigDef("share.auto.offset.reset", ConfigType.STRING, "latest",
              "Where a share group starts on a partition it has never consumed: latest (new records "
              "only) or earliest (from the log start).", validator=OneOf(("latest", "earliest"))),
    ConfigDef("share.record.lock.duration.ms", ConfigType.INT, None,
              "How long a member of this share group holds the records it acquired; the broker's "
              "group.share.record.lock.duration.ms when not set."),
)
GROUP_DEFS = {d.name: d for d in GROUP_CONFIGS}


def validate_group_configs(configs: Mapping[str, str], broker: BrokerConfig) -> None:
    """Raise ConfigError naming the first config that is unknown or out of bounds."""
    for name, text in configs.items():
        d = GROUP_DEFS.get(name)
        if d is None:
            raise ConfigError(name, "is not a group config")
        d.parse(text)
        if name == "share.record.lock.duration.ms":
            value = int(text)
            lo, hi = broker.group_share_min_record_lock_duration_ms, broker.group_share_max_record_lock_duration_ms
            if not lo <= value <= hi:
                raise ConfigError(name, f"value {value} must be within group.share.min.record.lock.duration.ms ({lo}) "
                                        f"and group.share.max.record.lock.duration.ms ({hi})")


def describe_group_config(broker: BrokerConfig, configs: Mapping[str, str]) -> list[ConfigEntry]:
    out = []
    for d in GROUP_CONFIGS:
        if d.name in configs:
            out.append(ConfigEntry(d.name, configs[d.name], ConfigSource.GROUP_CONFIG, False, False, d.type, d.doc))
        else:
            default = d.default if d.name != "share.record.lock.duration.ms" \
                else str(broker.group_share_record_lock_duration_ms)
            out.append(ConfigEntry(d.name, default, ConfigSource.DEFAULT_CONFIG, False, False, d.type, d.doc))
    return out
