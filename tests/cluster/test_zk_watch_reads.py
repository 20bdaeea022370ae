"""The broker's ZooKeeper view against a real ZooKeeper: a broker-registration read that fails
(the connection dropped between listing the ids and reading them) is read again once the
connection is back, since kazoo calls the watch again only when the list of ids changes; and a
broker's own close is quiet."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from clusterproc import ZooKeeperView, run_until
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss

from strom.cluster import zk_layout as zl

pytestmark = pytest.mark.timeout(90)


def _register(client: KazooClient, broker_id: int) -> None:
    endpoint = f"PLAINTEXT://127.0.0.1:{9000 + broker_id}"
    reg = zl.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None, (endpoint,),
                                {"PLAINTEXT": "PLAINTEXT"})
    client.create(zl.broker_path(broker_id), zl.encode_broker(reg), ephemeral=True)


def test_a_failed_registration_read_is_read_again_on_reconnect(zk_view: ZooKeeperView,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    loop, store, other = zk_view.loop, zk_view.store, zk_view.other
    _register(other, 2)
    run_until(loop, lambda: set(store.brokers) == {2})

    # The reads after the next change fail as a connection that stays down makes them fail
    # (each one retried, then given up).
    real_get = store.zk.get

    def dropped(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionLoss()

    store.zk.get = dropped  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="strom.cluster"):
        _register(other, 3)
        run_until(loop, lambda: "could not read the broker registrations" in caplog.text)
    store.zk.get = real_get  # type: ignore[method-assign]
    loop.run_until_complete(asyncio.sleep(0.3))
    assert set(store.brokers) == {2}  # the view is stale until the connection is back ...

    store._on_state(KazooState.CONNECTED)  # what kazoo reports when it has reconnected
    run_until(loop, lambda: set(store.brokers) == {2, 3})  # ... then read again

    with caplog.at_level(logging.INFO):
        caplog.clear()
        store.close()
        run_until(loop, lambda: "ZooKeeper session closed" in caplog.text)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
