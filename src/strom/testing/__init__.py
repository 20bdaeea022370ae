"""strom as the Kafka of Python tests: an embedded broker with fault injection, and a pytest plugin.

``EmbeddedBroker`` starts a real broker in a child process; the pytest plugin (strom.testing.plugin,
registered as ``strom``) gives tests the ``strom_broker``, ``strom_topic`` and
``strom_broker_factory`` fixtures. See docs/testing.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.testing.embedded import BrokerStartError, EmbeddedBroker, Record

__all__ = ["BrokerStartError", "EmbeddedBroker", "Record"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: pytest imports this package for the plugin in every test run.
    if name in __all__:
        from strom.testing import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
