"""SCRAM credentials in ZooKeeper, where Kafka keeps them: /config/users/<user> holds
``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``
and every change is announced with a /config/changes/config_change_<seq> node, as Kafka's tools do.

Every broker keeps a cache filled by watches (children of /config/users, then each user's data),
so a user added through one broker can log in at any other within moments. Watch callbacks run
on kazoo's thread and only swap whole dictionary entries (atomic), which the loop reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from strom.cluster import zk_layout as zl
from strom.cluster.metadata import require_connected
from strom.security.credentials import Credentials
from strom.security.scram import MECHANISMS, ScramCredential


class ZkCredentialStore:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self._users: Credentials = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()  # the watched set, touched from kazoo's thread

    def start(self) -> None:
        """Blocking (call it in a thread, once connected): watch the users."""
        self.zk.ChildrenWatch(zl.CONFIG_USERS, self._users_changed)

    def load(self) -> None:
        """Blocking: read every user once, without watches (a tool's one-off view)."""
        for child in self.zk.get_children(zl.CONFIG_USERS):
            user = zl.desanitize(child)
            data, _ = self.zk.get(zl.user_config_path(user))
            self._user_watch(user)(data, None)

    def _users_changed(self, children: list[str]) -> None:
        users = {zl.desanitize(c) for c in children}  # znode names are URL-encoded, as in Kafka
        with self._lock:
            new = users - self._watched
            self._watched |= new
        for user in new:
            self.zk.DataWatch(zl.user_config_path(user), self._user_watch(user))

    def _user_watch(self, user: str) -> Any:
        def watch(data: bytes | None, stat: Any) -> bool:
            if data is None:  # deleted: stop watching (a new node gets a new watch)
                self._users.pop(user, None)
                with self._lock:
                    self._watched.discard(user)
                return False
            config = zl.decode_config(data)
            self._users[user] = {m: ScramCredential.from_text(t) for m, t in config.items() if m in MECHANISMS}
            return True

        return watch

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def all(self) -> Credentials:
        return {u: dict(m) for u, m in self._users.items() if m}

    def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]], deletions: Iterable[tuple[str, str]]) -> None:
        """Blocking: each user's node is rewritten (compare-and-set on its version, so a concurrent
        change is not lost), other keys in it (quotas) kept, then the change is announced."""
        require_connected(self.zk, self.zk.hosts)
        changes: dict[str, list[tuple[str, ScramCredential | None]]] = {}
        for user, mechanism in deletions:
            changes.setdefault(user, []).append((mechanism, None))
        for user, mechanism, credential in upserts:
            changes.setdefault(user, []).append((mechanism, credential))
        for user, items in changes.items():
            self._apply(user, items)
            self.zk.create(f"{zl.CONFIG_CHANGES}/config_change_",
                           zl.encode_config_change(f"users/{zl.sanitize(user)}"), sequence=True)

    def _apply(self, user: str, items: list[tuple[str, ScramCredential | None]]) -> None:
        path = zl.user_config_path(user)
        while True:
            try:
                data, stat = self.zk.get(path)
                config, version = zl.decode_config(data), stat.version
            except NoNodeError:
                config, version = {}, -1
            for mechanism, credential in items:
                if credential is None:
                    config.pop(mechanism, None)
                else:
                    config[mechanism] = credential.to_text()
            try:
                if version < 0:
                    self.zk.create(path, zl.encode_config(config), makepath=True)
                else:
                    self.zk.set(path, zl.encode_config(config), version=version)
            except (NodeExistsError, NoNodeError, BadVersionError):
                continue  # someone else changed it meanwhile: read again
            # This broker answers from its cache at once; the watch keeps the others up to date.
            self._users[user] = {m: ScramCredential.from_text(t) for m, t in config.items() if m in MECHANISMS}
            return
