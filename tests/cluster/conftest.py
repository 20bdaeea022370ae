"""Cluster fixtures: one ZooKeeper and three brokers shared by every test that does not break them for
good (a test that stops a broker restarts it; ``cluster`` checks all are up and settled). Modules
that need other broker settings set CLUSTER_OVERRIDES and get a cluster of their own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerproc import free_port
from clusterproc import Cluster, ZooKeeperView
from kazoo.client import KazooClient

from strom.cluster.zk_store import ZkMetadataStore
from strom.devcluster import ZooKeeperServer


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The run's one cluster with the default test settings (tests/conftest.py puts every test that
    uses it into one xdist group, so one worker builds it)."""
    c = Cluster(tmp_path_factory.mktemp("shared-cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def module_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # A module may set CLUSTER_OVERRIDES (broker configs) for a cluster of its own.
    overrides = getattr(request.module, "CLUSTER_OVERRIDES", None)
    if overrides is None:
        yield request.getfixturevalue("shared_cluster")
        return
    c = Cluster(tmp_path_factory.mktemp("cluster"), overrides=overrides)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of the test's own, without brokers: for tests that drive the broker's ZooKeeper
    view (ZkMetadataStore) or the controller directly."""
    zk = ZooKeeperServer(tmp_path / "zookeeper", free_port())
    try:
        zk.start()
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zk_view(zookeeper: ZooKeeperServer) -> Iterator[ZooKeeperView]:
    loop = asyncio.new_event_loop()
    store = ZkMetadataStore(zookeeper.connect, 6000, 10000, broker_id=1)
    other = KazooClient(zookeeper.connect)
    other.start(10)
    try:
        store.connect(loop)
        yield ZooKeeperView(loop, store, other)
    finally:
        store.close()
        other.stop()
        other.close()
        loop.close()


@pytest.fixture
def cluster(module_cluster: Cluster) -> Cluster:
    module_cluster.ensure_all_up()
    return module_cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed cluster test carries the tail of every broker's log."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        c = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None  # type: ignore[attr-defined]
        if isinstance(c, Cluster):
            report.sections.append(("cluster logs", c.logs()))


def unique(name: str) -> str:
    import time

    return f"{name}-{time.monotonic_ns() % 10**9}"


