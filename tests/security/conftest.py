"""Fixtures of the security tests: a session's certificates and a module's broker with a listener
of each kind (the helpers are in sechelpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sechelpers import Certs, SecureBroker, make_certs, start_secure


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    b = start_secure(certs, tmp_path_factory.mktemp("secure") / "data")
    try:
        yield b
    finally:
        b.proc.stop()
