"""How this broker connects to the others (replica fetchers): the inter-broker listener's security
protocol with the broker's own client settings, as Kafka does: that listener's truststore (and
keystore, for mutual TLS), ``sasl.mechanism.inter.broker.protocol``, and the username and password
of the listener's JAAS configuration for that mechanism."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from strom.config import BrokerConfig, ConfigError
from strom.security import tls
from strom.security.listener import jaas_entry
from strom.security.listener_config import ListenerConfig
from strom.security.sasl_server import SUPPORTED_MECHANISMS


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


PLAINTEXT_CLIENT = ClientSecurity()


def inter_broker(config: BrokerConfig) -> ClientSecurity:
    """The client settings for the inter-broker listener; ConfigError for what cannot work."""
    name = config.inter_broker_listener_name
    if name is None or config.zookeeper_connect is None:
        return PLAINTEXT_CLIENT  # a single broker talks to no other
    protocol = config.listener_security_protocol_map.get(name, "PLAINTEXT")
    lc = ListenerConfig(config, name)
    context = tls.client_context(lc) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    key = "sasl.mechanism.inter.broker.protocol"
    mechanism = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(key, f"{mechanism} is not supported: use one of {', '.join(SUPPORTED_MECHANISMS)}")
    enabled = [m.upper() for m in lc.get_list("sasl.enabled.mechanisms")]
    if mechanism not in enabled:
        raise ConfigError(key, f"{mechanism} is not enabled on the inter-broker listener {name}")
    entry = jaas_entry(lc, mechanism)
    if entry is None or not entry.username or entry.password is None:
        raise ConfigError(f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config",
                          f"the broker's own login on listener {name} needs username and password")
    return ClientSecurity(protocol, context, mechanism, entry.username, entry.password)
