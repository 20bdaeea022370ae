"""Kafka's broker keys that strom has no feature for, and when such a key may be set.

Kafka accepts every broker key it defines (the generated table in kafka_broker_keys.py), so strom
does too: such a key is parsed with Kafka's type, default and simple validators, stored, and reported
by DescribeConfigs with its value and source. But a setting strom accepts must take effect, so:

* A key that tunes a feature strom does not have, while the switch of that feature is off, is *inert*:
  any valid value is accepted (Kafka itself ignores it then), and a value other than Kafka's default
  logs one warning naming it. Kerberos and OAUTHBEARER (strom offers neither mechanism), tiered
  storage, the share coordinator's tuning, delegation tokens, ZooKeeper over TLS, KRaft quorum settings (strom takes its
  cluster metadata from ZooKeeper) and the password encoder (strom has no dynamic password) are such
  families.
* Any other Kafka-only key, and the switch of each family, would need strom to act: it is accepted at
  Kafka's default only; another value stops the broker (or refuses AlterConfigs) with one line naming
  the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._defs import ConfigDef, ConfigType, Importance, OneOf, Range, Validator
from .kafka_broker_keys import KAFKA_BROKER_KEYS, KafkaKey


@dataclass(frozen=True)
class Family:
    """Kafka keys of one feature strom lacks: ``member`` tells a key of it, ``switch`` (excluded from the
    family, never inert) is the key that would turn the feature on, ``feature`` is said in messages."""

    feature: str
    member: Callable[[KafkaKey], bool]
    switch: str | None = None


_OAUTH_LOGIN = ("sasl.login.refresh.", "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
                "sasl.login.retry.backoff.")
# Knobs of Kafka's share coordinator and share fetch purgatory that have no counterpart in strom's
# share groups (strom writes each change at once and has no coordinator threads or batching).
_SHARE_TUNING = {"share.coordinator.append.linger.ms", "share.coordinator.load.buffer.size",
                 "share.coordinator.threads", "share.fetch.purgatory.purge.interval.requests"}
# Kafka-only keys whose one accepted value is strom's, not Kafka's default: (value, why).
STROM_VALUES = {"group.share.enable": ("true", "share groups are always on in strom")}
_KRAFT_NOT_INERT = {"eligible.leader.replicas.enable", "zookeeper.metadata.migration.enable",
                    "server.max.startup.time.ms"}

FAMILIES: tuple[Family, ...] = (
    Family("Kerberos (SASL/GSSAPI), which strom does not offer", lambda k: k.name.startswith("sasl.kerberos.")),
    Family("OAUTHBEARER and login token refresh, which strom does not offer",
           lambda k: k.name.startswith(("sasl.oauthbearer.", *_OAUTH_LOGIN))),
    Family("tiered storage, which strom does not have", lambda k: k.source == "RemoteLogManagerConfig",
           switch="remote.log.storage.system.enable"),
    Family("the share coordinator's tuning, which strom's share groups do not have",
           lambda k: k.name in _SHARE_TUNING),
    Family("delegation tokens, which strom does not offer",
           lambda k: k.name.startswith("delegation.token."), switch="delegation.token.secret.key"),
    Family("ZooKeeper over TLS, which strom does not use", lambda k: k.name.startswith("zookeeper.ssl."),
           switch="zookeeper.ssl.client.enable"),
    Family("KRaft, which strom does not run (its cluster metadata is in ZooKeeper)",
           lambda k: k.source in ("KRaftConfigs", "QuorumConfig") and k.name not in _KRAFT_NOT_INERT),
    Family("the password encoder of dynamic password configs, which strom does not have",
           lambda k: k.source == "PasswordEncoderConfigs"),
)

_TYPES = {t.name: t for t in ConfigType}


def family_of(key: KafkaKey) -> Family | None:
    for family in FAMILIES:
        if key.name != family.switch and family.member(key):
            return family
    return None


def _switch_feature(name: str) -> str | None:
    return next((f.feature for f in FAMILIES if f.switch == name), None)


def _validator(key: KafkaKey) -> Validator | None:
    if key.choices is not None:
        return OneOf(key.choices)
    if key.min is not None or key.max is not None:
        return Range(key.min, key.max)
    return None


def kafka_only_configs(strom_names: set[str]) -> tuple[tuple[ConfigDef, ...], dict[str, str], dict[str, str]]:
    """ConfigDefs of the Kafka keys not in ``strom_names``; their Kafka dynamic update modes; and, for
    each one strom accepts only at its default, why (the end of its one-line refusal)."""
    defs, modes, refusals = [], {}, {}
    for key in KAFKA_BROKER_KEYS:
        if key.name in strom_names:
            continue
        family = family_of(key)
        default = key.default
        if key.name in STROM_VALUES:
            default, why = STROM_VALUES[key.name]
            doc = f"Kafka broker config ({key.source}); {why}: only {default} is accepted."
            refusals[key.name] = f"{why}; only {default} is accepted"
        elif family is not None:
            doc = f"Kafka broker config ({key.source}) of {family.feature}: stored and reported, no effect."
        else:
            feature = _switch_feature(key.name)
            why = f"turns on {feature}" if feature else "strom has no feature for it"
            doc = f"Kafka broker config ({key.source}); {why}: only Kafka's default is accepted."
            refusals[key.name] = f"{why}; only Kafka's default ({key.default if key.default is not None else 'null'}) " \
                                 "is accepted"
        defs.append(ConfigDef(key.name, _TYPES[key.type], default, doc, Importance.LOW, _validator(key),
                              ignored=True))
        modes[key.name] = key.mode
    return tuple(defs), modes, refusals
