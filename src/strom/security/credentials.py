"""Where the broker keeps SCRAM credentials: a file in the first log dir (single broker), or
ZooKeeper's /config/users/<user> in a cluster (strom.cluster.zk_credentials). Both hold, per user
and mechanism, Kafka's credential text (security/scram.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from strom.security.scram import ScramCredential
from strom.storage.atomic import write_atomic

CREDENTIALS_FILE = "scram-credentials.json"
CREDENTIALS_FILE_MODE = 0o600

# user -> mechanism -> credential
Credentials = dict[str, dict[str, ScramCredential]]


class CredentialStore(Protocol):
    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def all(self) -> Credentials: ...

    def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]],
              deletions: Iterable[tuple[str, str]]) -> None:
        """Apply the changes in one write; blocking (call it from a thread)."""
        ...


class FileCredentialStore:
    """Single broker: one JSON document, replaced atomically (write .tmp, fsync, rename)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CREDENTIALS_FILE
        self._users: Credentials = {}
        if self.path.exists():
            doc = json.loads(self.path.read_text())
            self._users = {u: {m: ScramCredential.from_text(t) for m, t in mechs.items()}
                           for u, mechs in doc.get("users", {}).items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def all(self) -> Credentials:
        return {u: dict(m) for u, m in self._users.items()}

    def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]],
              deletions: Iterable[tuple[str, str]]) -> None:
        users = self.all()
        for user, mechanism in deletions:
            users.get(user, {}).pop(mechanism, None)
        for user, mechanism, credential in upserts:
            users.setdefault(user, {})[mechanism] = credential
        users = {u: m for u, m in users.items() if m}
        doc = {"version": 1, "users": {u: {m: c.to_text() for m, c in ms.items()} for u, ms in users.items()}}
        # Salted keys, but still nobody else's business: private from the temporary file's creation.
        write_atomic(self.path, json.dumps(doc, indent=1).encode(), mode=CREDENTIALS_FILE_MODE)
        self._users = users
