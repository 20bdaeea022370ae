"""Shared fixtures: a real broker subprocess per test (``broker``) or per module (``module_broker``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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
