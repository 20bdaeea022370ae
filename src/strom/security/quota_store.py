"""Where client quotas live: a JSON file beside a single broker's metadata, or ZooKeeper in Kafka's
layout for a cluster:

  /config/users/<user>                        {"version": 1, "config": {"producer_byte_rate": "1024"}}
  /config/users/<user>/clients/<client-id>
  /config/clients/<client-id>
  /config/changes/config_change_<seq>         {"version": 2, "entity_path": "users/alice"}

``<default>`` names the defaults; other names are URL-encoded as Kafka's Sanitizer does. A user's
znode may hold other configs (SCRAM credentials): only the quota keys are touched, by
compare-and-set on the node's version.

The calls here block (file or ZooKeeper I/O): the broker runs them in a thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from strom.cluster.metadata import require_connected
from strom.cluster.zk_layout import desanitize, sanitize
from strom.security.quotas import QUOTA_KEYS, QuotaEntity
from strom.storage.atomic import write_atomic

QUOTA_FILE = "quotas.json"
CONFIG_CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
KEPT_CHANGES = 100

Change = tuple[QuotaEntity, dict[str, float | None]]  # None: remove that key


class QuotaStore(Protocol):
    def load(self) -> dict[QuotaEntity, dict[str, float]]: ...
    def alter(self, changes: Iterable[Change]) -> None: ...


def apply(current: dict[str, float], change: dict[str, float | None]) -> dict[str, float]:
    out = dict(current)
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


class LocalQuotaStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / QUOTA_FILE
        self._lock = threading.Lock()

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        if not self.path.exists():
            return {}
        doc = json.loads(self.path.read_text())
        return {QuotaEntity(e.get("user"), e.get("client_id")): {k: float(v) for k, v in e["quotas"].items()}
                for e in doc.get("entities", [])}

    def alter(self, changes: Iterable[Change]) -> None:
        with self._lock:
            quotas = self.load()
            for entity, change in changes:
                quotas[entity] = apply(quotas.get(entity, {}), change)
                if not quotas[entity]:
                    del quotas[entity]
            doc = {"version": 1, "entities": [
                {"user": e.user, "client_id": e.client_id, "quotas": q}
                for e, q in sorted(quotas.items(), key=lambda kv: (kv[0].user or "", kv[0].client_id or ""))]}
            write_atomic(self.path, json.dumps(doc, indent=1).encode())


# One encoding for every entity name under /config (SCRAM users too): cluster/zk_layout.py's.
_encode, _decode = sanitize, desanitize


def entity_path(e: QuotaEntity) -> str:
    """The entity's path under /config (Kafka's entity_path of a change notification)."""
    if e.user is not None:
        path = f"users/{_encode(e.user)}"
        return path + (f"/clients/{_encode(e.client_id)}" if e.client_id is not None else "")
    assert e.client_id is not None
    return f"clients/{_encode(e.client_id)}"


class ZkQuotaStore:
    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        out: dict[QuotaEntity, dict[str, float]] = {}

        def read(entity: QuotaEntity) -> None:
            quotas = {k: float(v) for k, v in self._config(entity_path(entity)).items() if k in QUOTA_KEYS}
            if quotas:
                out[entity] = quotas

        for user in self._children("/config/users"):
            read(QuotaEntity(_decode(user), None))
            for client in self._children(f"/config/users/{user}/clients"):
                read(QuotaEntity(_decode(user), _decode(client)))
        for client in self._children("/config/clients"):
            read(QuotaEntity(None, _decode(client)))
        return out

    def watch(self, on_change: Callable[[], None]) -> None:
        """``on_change`` (kazoo's thread) whenever a config change notification appears."""
        self.zk.ensure_path(CONFIG_CHANGES)
        self.zk.ChildrenWatch(CONFIG_CHANGES, lambda _children: on_change())

    def alter(self, changes: Iterable[Change]) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        require_connected(self.zk, self.zk.hosts)
        for entity, change in changes:
            path = "/config/" + entity_path(entity)
            while True:  # read-modify-write of the quota keys, compare-and-set on the version
                try:
                    data, stat = self.zk.get(path)
                    doc, version = json.loads(data or b"{}"), stat.version
                except NoNodeError:
                    doc, version = {}, -1
                config = dict(doc.get("config", {}))
                quotas = apply({k: float(v) for k, v in config.items() if k in QUOTA_KEYS}, change)
                config = {k: v for k, v in config.items() if k not in QUOTA_KEYS}
                config.update({k: _number(v) for k, v in quotas.items()})
                payload = json.dumps({"version": 1, "config": config}).encode()
                try:
                    if version == -1:
                        self.zk.create(path, payload, makepath=True)
                    else:
                        self.zk.set(path, payload, version=version)
                    break
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
            self.zk.create(f"{CONFIG_CHANGES}/{CHANGE_PREFIX}",
                           json.dumps({"version": 2, "entity_path": entity_path(entity)}).encode(),
                           sequence=True, makepath=True)
        self._trim()

    def _trim(self) -> None:
        from kazoo.exceptions import NoNodeError

        children = sorted(c for c in self._children(CONFIG_CHANGES) if c.startswith(CHANGE_PREFIX))
        for old in children[:-KEPT_CHANGES]:
            try:
                self.zk.delete(f"{CONFIG_CHANGES}/{old}")
            except NoNodeError:
                continue

    def _config(self, relative: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError

        try:
            data = self.zk.get("/config/" + relative)[0]
        except NoNodeError:
            return {}
        return dict(json.loads(data or b"{}").get("config", {}))

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(self.zk.get_children(path))
        except NoNodeError:
            return []


def _number(v: float) -> str:
    """As Kafka writes quota values: "1024.0" style doubles, integers without a fraction."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))
