"""The broker's ZooKeeper view against a real ZooKeeper: a broker-registration read that fails
(the connection dropped between listing the ids and reading them) is read again once the
connection is back, since kazoo calls the watch again only when the list of ids changes; and a
broker's own close is quiet."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss

from strom.cluster import zk_layout as zl
from strom.cluster.zk_store import ZkMetadataStore
from strom.devcluster import ZooKeeperServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        yield zk
    finally:
        zk.stop()


def _register(client: KazooClient, broker_id: int) -> None:
    endpoint = f"PLAINTEXT://127.0.0.1:{9000 + broker_id}"
    reg = zl.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None, (endpoint,),
                                {"PLAINTEXT": "PLAINTEXT"})
    client.create(zl.broker_path(broker_id), zl.encode_broker(reg), ephemeral=True)


def _until(loop: asyncio.AbstractEventLoop, check: Any, timeout: float = 10) -> None:
    """Run the loop (the store delivers its updates there) until ``check()`` holds."""
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.05)

    loop.run_until_complete(asyncio.wait_for(wait(), timeout))


def test_a_failed_registration_read_is_read_again_on_reconnect(zookeeper: ZooKeeperServer,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    store = ZkMetadataStore(zookeeper.connect, 6000, 10000, broker_id=1)
    other = KazooClient(zookeeper.connect)
    other.start(10)
    try:
        store.connect(loop)
        _register(other, 2)
        _until(loop, lambda: set(store.brokers) == {2})

        # The reads after the next change fail as a connection that stays down makes them fail
        # (each one retried, then given up).
        real_get = store.zk.get

        def dropped(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionLoss()

        store.zk.get = dropped  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="strom.cluster"):
            _register(other, 3)
            _until(loop, lambda: "could not read the broker registrations" in caplog.text)
        store.zk.get = real_get  # type: ignore[method-assign]
        loop.run_until_complete(asyncio.sleep(0.3))
        assert set(store.brokers) == {2}  # the view is stale until the connection is back ...

        store._on_state(KazooState.CONNECTED)  # what kazoo reports when it has reconnected
        _until(loop, lambda: set(store.brokers) == {2, 3})  # ... then read again

        with caplog.at_level(logging.INFO):
            caplog.clear()
            store.close()
            loop.run_until_complete(asyncio.sleep(0.3))
        assert "ZooKeeper session closed" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    finally:
        store.close()
        other.stop()
        other.close()
        loop.close()
