"""Several listeners: a client is told the addresses of the listener it came in on (Kafka's rule
for Metadata and FindCoordinator), never another listener's."""

from __future__ import annotations

from typing import Any

import pytest
from brokerproc import free_port
from helpers import RawConnection

pytestmark = pytest.mark.timeout(60)


def test_each_listener_advertises_itself(broker_factory: Any) -> None:
    client, internal = free_port(), free_port()
    # The second listener is advertised on another port, as when a proxy or NAT sits in front of it.
    internal_advertised = free_port()
    broker_factory(overrides={
        "listeners": f"CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal_advertised}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    })
    with RawConnection(f"127.0.0.1:{client}") as c:
        assert c.advertised() == ({0: ("127.0.0.1", client)}, ("127.0.0.1", client))
    with RawConnection(f"127.0.0.1:{internal}") as c:
        assert c.advertised() == ({0: ("127.0.0.1", internal_advertised)}, ("127.0.0.1", internal_advertised))
