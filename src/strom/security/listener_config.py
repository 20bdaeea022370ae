"""A listener's view of the broker configuration: ``listener.name.<listener>.<key>`` wins over
``<key>`` (Kafka's per-listener overrides), and errors name the key that was actually read."""

from __future__ import annotations

from strom.config import BrokerConfig
from strom.config.definitions import BROKER_DEFS


class ListenerConfig:
    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self.config = config
        self.listener = listener
        self.prefix = f"listener.name.{listener.lower()}."
        # Kafka writes the listener name in lower case; accept any case.
        self._overrides = {k[len(self.prefix):]: v for k, v in config.raw.items()
                           if k.lower().startswith(self.prefix)}

    def key(self, name: str) -> str:
        """The property ``name`` is read from: the per-listener one when it is set."""
        return self.prefix + name if name in self._overrides else name

    def get(self, name: str) -> str | None:
        """Text of the property (per-listener, then broker-wide, then Kafka's default)."""
        if name in self._overrides:
            return self._overrides[name]
        if name in self.config.raw:
            return self.config.raw[name]
        d = BROKER_DEFS.get(name)
        return d.default if d is not None else None

    def get_list(self, name: str) -> list[str]:
        return [s.strip() for s in (self.get(name) or "").split(",") if s.strip()]
