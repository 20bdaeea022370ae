"""How many client connections the broker holds, and from whom (Kafka's ConnectionQuotas).

- ``max.connections``: at the limit a listener accepts no new connection until another closes (the
  new one waits, accepted by the kernel but not served, as behind Kafka's blocked Acceptor). Each
  listener may have its own limit, ``listener.name.<listener>.max.connections``. The inter-broker
  listener is spared the broker-wide limit when there are several listeners: a broker of the cluster
  is accepted anyway, and the least recently active connection of another listener makes room.
- ``max.connections.per.ip`` with ``max.connections.per.ip.overrides``: a connection from an address
  that already has its count is closed as soon as it is accepted, before any TLS handshake.

The counts live on the event loop (one writer); ``slot_available`` and ``admit`` are plain calls,
the waiting is the acceptor's (strom.broker.acceptor).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from strom.config import BrokerConfig, ConfigError
from strom.config.definitions import BROKER_DEFS
from strom.security.listener_config import ListenerConfig

OVERRIDES_KEY = "max.connections.per.ip.overrides"


def normalise_address(address: str) -> str:
    """An address as the counts key it: IPv4-mapped IPv6 as IPv4, IPv6 in its short form."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """Host or address -> limit, into address -> limit. Kafka resolves the names once, when it reads
    the setting; a name that does not resolve stops the broker at start, naming the key."""
    out: dict[str, int] = {}
    for host, limit in overrides.items():
        try:
            ip = ipaddress.ip_address(host)
            out[normalise_address(str(ip))] = limit
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as e:
            raise ConfigError(OVERRIDES_KEY, f"cannot resolve host {host}: {e.strerror or e}") from None
        for info in infos:
            out[normalise_address(str(info[4][0]))] = limit
    return out


@dataclass
class ConnectionQuotas:
    max_connections: int
    max_per_ip: int
    per_ip_overrides: dict[str, int]  # normalised address -> limit
    listener_limits: dict[str, int]  # listener name -> its max.connections
    protected_listener: str | None = None  # spared the broker-wide limit (the inter-broker listener)
    total: int = 0
    by_listener: dict[str, int] = field(default_factory=dict)
    by_address: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionQuotas:
        limits = {}
        for listener in config.listeners:
            lc = ListenerConfig(config, listener.name)
            text = lc.get("max.connections")
            key = lc.key("max.connections")
            try:
                value = BROKER_DEFS["max.connections"].parse(text or "")
            except ConfigError as e:
                raise ConfigError(key, e.reason) from None
            assert isinstance(value, int)
            limits[listener.name] = value
        protected = config.inter_broker_listener_name if len(config.listeners) > 1 else None
        return cls(config.max_connections, config.max_connections_per_ip,
                   resolve_overrides(config.max_connections_per_ip_overrides), limits, protected)

    def limit_for(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_per_ip)

    def slot_available(self, listener: str) -> bool:
        """May ``listener`` take one more connection now (the per-address limit aside)?"""
        if self.by_listener.get(listener, 0) >= self.listener_limits.get(listener, self.max_connections):
            return False
        return listener == self.protected_listener or self.total < self.max_connections

    def over_broker_limit(self) -> bool:
        """More connections than max.connections: only the protected listener can cause that."""
        return self.total > self.max_connections

    def admit(self, listener: str, address: str) -> bool:
        """Count a connection just accepted from ``address``; False (nothing counted) when that
        address already has as many as it may."""
        count = self.by_address.get(address, 0)
        if count >= self.limit_for(address):
            return False
        self.by_address[address] = count + 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1
        self.total += 1
        return True

    def release(self, listener: str, address: str) -> None:
        count = self.by_address.get(address, 0)
        if count <= 1:
            self.by_address.pop(address, None)
        else:
            self.by_address[address] = count - 1
        self.by_listener[listener] = max(self.by_listener.get(listener, 0) - 1, 0)
        self.total = max(self.total - 1, 0)
