"""The pytest plugin ``strom`` (entry point ``pytest11``; ``-p no:strom`` turns it off).

Fixtures:
- ``strom_broker``: one EmbeddedBroker for the session (so one per pytest-xdist worker);
  ``strom_broker_config`` (session scope, override it in a conftest) gives its config;
- ``strom_topic``: a new, uniquely named topic on ``strom_broker`` for each test, returned as its
  name; one partition unless ``@pytest.mark.strom_topic(partitions=3, config={...})`` says otherwise;
- ``strom_broker_factory``: ``make(config=None) -> EmbeddedBroker``, each stopped after the test.

When a test fails, the log lines the brokers wrote during it are attached to its report.

This module imports only pytest and the standard library; the broker code is imported, and a
broker started, only when a test asks for one of the fixtures.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from strom.testing.embedded import EmbeddedBroker

_LIVE = pytest.StashKey[list["EmbeddedBroker"]]()  # brokers whose logs go into failure reports
_MARKS = pytest.StashKey[dict[int, int]]()  # id(broker) -> its log position when the test started
_MAX_REPORT_LINES = 400
_topic_numbers = itertools.count()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "strom_topic(partitions=1, config=None): partitions and topic configs (Kafka's names) of the "
        "topic the strom_topic fixture creates",
    )
    config.stash[_LIVE] = []


def _live(config: pytest.Config) -> list[EmbeddedBroker]:
    return config.stash.setdefault(_LIVE, [])


@pytest.fixture(scope="session")
def strom_broker_config() -> dict[str, str]:
    """Broker config (Kafka's property names) for ``strom_broker``; override to change it."""
    return {}


@pytest.fixture(scope="session")
def strom_broker(request: pytest.FixtureRequest, strom_broker_config: dict[str, str]) -> Iterator[EmbeddedBroker]:
    """One strom broker for the whole session (each pytest-xdist worker gets its own)."""
    from strom.testing.embedded import EmbeddedBroker

    live = _live(request.config)
    with EmbeddedBroker(strom_broker_config) as broker:
        live.append(broker)
        try:
            yield broker
        finally:
            live.remove(broker)


def _topic_name(node_name: str) -> str:
    # Kafka's legal characters, short enough for partition directory names; the number and the
    # worker keep names unique across tests, parametrizations and xdist workers.
    base = re.sub(r"[^a-zA-Z0-9._-]+", "_", node_name).strip("_.")[:80] or "topic"
    return f"{base}-{next(_topic_numbers)}"


@pytest.fixture
def strom_topic(request: pytest.FixtureRequest, strom_broker: EmbeddedBroker) -> str:
    """A new topic for this test, named after it: 1 partition unless the strom_topic marker says so."""
    partitions, config = 1, None
    marker = request.node.get_closest_marker("strom_topic")
    if marker is not None:
        partitions = int(marker.kwargs.get("partitions", marker.args[0] if marker.args else 1))
        config = marker.kwargs.get("config")
    worker = getattr(request.config, "workerinput", {}).get("workerid", "")
    name = _topic_name(f"{request.node.name}-{worker}" if worker else request.node.name)
    strom_broker.create_topic(name, partitions, config)
    return name


@pytest.fixture
def strom_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EmbeddedBroker]]:
    """``make(config=None)`` starts another broker; every one is stopped when the test ends."""
    from strom.testing.embedded import EmbeddedBroker

    live = _live(request.config)
    started: list[EmbeddedBroker] = []

    def make(config: dict[str, str] | None = None) -> EmbeddedBroker:
        broker = EmbeddedBroker(config)
        started.append(broker)
        live.append(broker)
        return broker.start()

    try:
        yield make
    finally:
        for broker in started:
            try:
                broker.stop()
            finally:
                live.remove(broker)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_MARKS] = {id(b): b.log_position for b in _live(item.config)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report gets what each broker logged since the test began."""
    report = yield
    if report.failed:
        _attach_logs(item, report)
    return report


def _attach_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    marks = item.stash.get(_MARKS, {})
    for broker in _live(item.config):
        lines = broker.log_since(marks.get(id(broker), 0))
        if not lines:
            continue
        if len(lines) > _MAX_REPORT_LINES:
            lines = [f"... {len(lines) - _MAX_REPORT_LINES} earlier lines left out", *lines[-_MAX_REPORT_LINES:]]
        report.sections.append((f"strom broker {broker.bootstrap_servers} log ({report.when})", "\n".join(lines)))
