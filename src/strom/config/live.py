"""The broker's current configuration, which dynamic broker configs (AlterConfigs on a BROKER
resource, or their change in ZooKeeper) replace while it runs.

A part that needs only static settings takes a ``BrokerConfig`` (frozen) at construction. A part
that must see dynamic changes takes the ``LiveConfig`` and reads ``value`` when it acts, or
``subscribe``s to hear of each new value. ``replace`` is the one way the value changes.
"""

from __future__ import annotations

from collections.abc import Callable

from .broker import BrokerConfig

Subscriber = Callable[[BrokerConfig], None]


class LiveConfig:
    __slots__ = ("_value", "_subscribers")

    def __init__(self, value: BrokerConfig) -> None:
        self._value = value
        self._subscribers: list[Subscriber] = []

    @property
    def value(self) -> BrokerConfig:
        """The configuration in force now."""
        return self._value

    def replace(self, new: BrokerConfig) -> None:
        """Put ``new`` in force, then tell the subscribers, in the order they subscribed."""
        self._value = new
        for callback in list(self._subscribers):
            callback(new)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(new)`` after every ``replace``; returns what cancels the subscription."""
        self._subscribers.append(callback)

        def cancel() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return cancel
