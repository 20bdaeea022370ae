"""Dynamic broker configs: what AlterConfigs may change on a BROKER resource, and its validation.

Kafka keeps two levels above server.properties: cluster-wide defaults (resource name "") and one
broker's own (resource name = its broker.id). Effective value: per-broker dynamic, else dynamic
default, else static (server.properties / --override), else the built-in default.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._defs import ConfigError
from .broker import BrokerConfig
from .definitions import BROKER_DEFS, DYNAMIC_BROKER_CONFIGS, PER_BROKER_CONFIGS


def check_dynamic_names(configs: Mapping[str, object], cluster_default: bool = False) -> None:
    """ConfigError for a name that is not a broker config, or not one that can change at runtime (at
    the cluster-wide default level, ``cluster_default``, not one Kafka lets only a broker set)."""
    for name in configs:
        if name not in BROKER_DEFS:
            raise ConfigError(name, "unknown broker config")
        if name not in DYNAMIC_BROKER_CONFIGS:
            raise ConfigError(name, "cannot be updated dynamically; set it in server.properties")
        if cluster_default and name in PER_BROKER_CONFIGS:
            raise ConfigError(name, "cannot be updated at the default cluster level; a broker id must be given")


def with_dynamic_configs(
    base: BrokerConfig, default: Mapping[str, str], per_broker: Mapping[str, str]
) -> BrokerConfig:
    """``base`` with these dynamic layers (replacing the ones it had); ConfigError if a name cannot
    be set dynamically, a value is bad, or the combination is (e.g. min over max compaction lag)."""
    check_dynamic_names(default, cluster_default=True)
    check_dynamic_names(per_broker)
    return base.with_dynamic(default, per_broker)
