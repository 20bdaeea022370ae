"""Shared fixtures: a real broker subprocess per test (``broker``) or per module (``module_broker``),
and how the suite is spread over pytest-xdist's workers (see docs/testing.md, "How the suite runs")."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run of `make test` (derandomized, no example
# database), so a failure in CI replays in a clean checkout. HYPOTHESIS_PROFILE=explore draws new
# examples each run, for hunting by hand.
settings.register_profile("strom", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "strom"))

sys.path.insert(0, str(Path(__file__).parent))

from brokerproc import BrokerProcess  # noqa: E402


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.kill() if b.proc is not None and b.proc.poll() is not None else b.stop()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker per module whose schema registry listens too (``registry_broker.registry_url``),
    returned once the registry has loaded ``_schemas``."""
    import urllib.request

    from brokerproc import free_port
    from helpers import wait_until

    url = f"http://127.0.0.1:{free_port()}"
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data",
                      overrides={"schema.registry.listeners": url}).start()

    def loaded() -> bool:
        try:
            with urllib.request.urlopen(url + "/subjects", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        wait_until(loaded, timeout=30, what="the schema registry to load")
        yield b
    finally:
        b.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type]:
    """Start brokers with custom overrides: ``broker_factory(overrides={...})``; all stopped at the end."""
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, data_dir: Path | None = None, **kw: object) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", overrides=overrides, **kw)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    make.started = started  # type: ignore[attr-defined]  # for the failure report below
    yield make  # type: ignore[misc]
    for b in started:
        b.stop()


# Session fixtures too costly to build once per worker: every test using one runs on one worker, in
# the xdist group named here (one Spark JVM, one shared cluster per run).
SHARED_SESSION_FIXTURES = {"spark": "spark-session", "shared_cluster": "shared-cluster"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its xdist group, unless it names one itself: the tests of a module that has a
    module-scoped fixture (a broker, a cluster, a browser for the module) run on one worker, so that
    fixture is built once; tests using a costly session fixture share that fixture's group; every
    other test is spread over the workers on its own (``--dist loadgroup``)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        group = None
        for name in (info.names_closure if info is not None else ()):
            defs = info.name2fixturedefs.get(name) if info is not None else None
            if not defs:
                continue
            scope = defs[-1].scope
            if name == "module_cluster" and defs[-1].baseid == "tests/cluster" \
                    and getattr(item.module, "CLUSTER_OVERRIDES", None) is None:  # type: ignore[attr-defined]
                name, scope = "shared_cluster", "session"  # tests/cluster/conftest.py hands it the shared one
            if scope == "session" and name in SHARED_SESSION_FIXTURES:
                group = SHARED_SESSION_FIXTURES[name]
                break
            if scope in ("module", "class", "package"):
                group = item.nodeid.split("::", 1)[0]
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # Longest first, so that no long test starts last and keeps one worker busy alone at the end.
    # xdist (--loadscope-reorder, its default) hands out the groups first, most tests first (the
    # shared cluster's, Spark's, the modules'); this order is the one of the tests on their own: the
    # slowest of librdkafka's cases, then the other cluster and Spark tests, then the rest.
    items.sort(key=_start_early)


def _start_early(item: pytest.Item) -> int:
    mark = item.get_closest_marker("xdist_group")
    if mark is not None and mark.args and mark.args[0] in SHARED_SESSION_FIXTURES.values():
        return 0
    if any(slow in item.nodeid for slow in LONGEST_CASES):
        return 0
    if item.nodeid.startswith(("tests/cluster/", "tests/spark/")):
        return 1
    return 2


LONGEST_CASES = ("0098_consumer_txn", "0103_transactions", "0137_barrier_batch_consume")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """When a test fails, attach the tail of the log of every broker it used to the report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        brokers = getattr(value, "started", None) or [value, getattr(value, "broker", None)]
        for i, b in enumerate(brokers):
            if isinstance(b, BrokerProcess) and b.log_lines:
                report.sections.append((f"broker log: {name}[{i}] (last 60 lines)", "\n".join(b.log_lines[-60:])))
