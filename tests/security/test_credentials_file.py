"""The single broker's SCRAM credentials file (salted keys) is private to the broker's user from the
moment it is written: its temporary file is created 0600, then written, fsynced and renamed, so no
other user can open it (and keep it open) while it is world-readable, even for a moment."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_security_cli import strom

from strom.security.credentials import CREDENTIALS_FILE, FileCredentialStore
from strom.security.scram import ScramCredential
from strom.storage import atomic

pytestmark = pytest.mark.timeout(120)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_users_add_leaves_a_private_credentials_file(broker: Any) -> None:
    path = broker.data_dir / CREDENTIALS_FILE
    r = strom("users", "add", "frank", "--password-stdin", "-b", broker.bootstrap, stdin="frank-secret\n")
    assert r.returncode == 0, r.stderr
    assert mode_of(path) == 0o600
    r = strom("users", "add", "gina", "--password", "g", "-m", "SCRAM-SHA-256", "-b", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert mode_of(path) == 0o600 and "gina" in path.read_text()
    assert not path.with_name(path.name + ".tmp").exists()
    broker.restart()  # the users are still there, read from that file
    listed = strom("users", "list", "--json", "-b", broker.bootstrap)
    assert listed.returncode == 0 and '"frank"' in listed.stdout and '"gina"' in listed.stdout


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int, int]]]:
    """Every os.open of the write helper: (name, flags, mode asked, permissions right after), with
    umask 0 so that only the mode given to os.open can narrow them."""
    calls: list[tuple[str, int, int, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *args: Any, **kw: Any) -> int:
        fd = real_open(path, flags, mode, *args, **kw)
        calls.append((os.fspath(path), flags, mode, stat.S_IMODE(os.fstat(fd).st_mode)))
        return fd

    monkeypatch.setattr(atomic.os, "open", spy)  # os itself: for this test only
    old_umask = os.umask(0)
    try:
        yield calls
    finally:
        os.umask(old_umask)


def test_temporary_file_is_created_private(tmp_path: Path, opened: list[tuple[str, int, int, int]]) -> None:
    store = FileCredentialStore(tmp_path)
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw")
    # A temporary file a crash left behind, readable by all, is not reused: it would keep its mode.
    leftover = tmp_path / (CREDENTIALS_FILE + ".tmp")
    leftover.write_text("{}")
    leftover.chmod(0o644)
    store.alter([("frank", "SCRAM-SHA-512", cred)], [])
    store.alter([("gina", "SCRAM-SHA-512", cred)], [("frank", "SCRAM-SHA-512")])
    creations = [c for c in opened if c[0].endswith(CREDENTIALS_FILE + ".tmp")]
    assert len(creations) == 2
    for _name, flags, mode, right_after in creations:
        assert mode == 0o600
        assert flags & os.O_CREAT and flags & os.O_EXCL
        assert right_after == 0o600  # before the first byte is written
    assert mode_of(tmp_path / CREDENTIALS_FILE) == 0o600 and not leftover.exists()
    assert FileCredentialStore(tmp_path).all() == {"gina": {"SCRAM-SHA-512": cred}}


def test_other_files_keep_their_mode(tmp_path: Path, opened: list[tuple[str, int, int, int]]) -> None:
    """Checkpoints and the like are written as before: 0644, a .tmp truncated rather than replaced."""
    target = tmp_path / "recovery-point-offset-checkpoint"
    atomic.write_atomic(target, b"0\n0\n")
    ((_, flags, mode, _),) = [c for c in opened if c[0].endswith(".tmp")]
    assert mode == 0o644 and flags & os.O_TRUNC and not flags & os.O_EXCL
    assert target.read_bytes() == b"0\n0\n" and mode_of(target) == 0o644
