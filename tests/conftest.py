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

    yield make  # type: ignore[misc]
    for b in started:
        b.stop()
