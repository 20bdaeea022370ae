"""Where ACLs live: a JSON file beside a single broker's metadata, or ZooKeeper in Kafka's layout
for a cluster (every broker reads them, and reloads when a change notification appears).

Kafka's ZooKeeper layout, kept so its tools' view of a cluster's ACLs reads the same:
  /kafka-acl/<ResourceType>/<name>                       literal patterns
  /kafka-acl-extended/prefixed/<ResourceType>/<name>     prefixed patterns
  each {"version": 1, "acls": [{"principal", "permissionType", "operation", "host"}]}
  /kafka-acl-changes/acl_changes_<seq>                   "Topic:name" after a literal change
  /kafka-acl-extended-changes/acl_changes_<seq>          JSON after a prefixed change
Every write of a resource's node is a compare-and-set on its version.

The calls here block (file or ZooKeeper I/O): the broker runs them in a thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from strom.cluster.metadata import require_connected
from strom.security.acl import AclBinding, AclOperation, AclPermission, InvalidAcl, PatternType, ResourceType
from strom.storage.atomic import write_atomic

log = logging.getLogger("strom.security")

ACL_FILE = "acls.json"

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
KEPT_CHANGES = 100  # older change notifications are removed by the writer

# Kafka's spellings in ZooKeeper (and in its tools' output).
_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
               ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
               ResourceType.USER: "User"}
_TYPES = {v: k for k, v in _TYPE_NAMES.items()}
_OP_NAMES = {AclOperation.ALL: "All", AclOperation.READ: "Read", AclOperation.WRITE: "Write",
             AclOperation.CREATE: "Create", AclOperation.DELETE: "Delete", AclOperation.ALTER: "Alter",
             AclOperation.DESCRIBE: "Describe", AclOperation.CLUSTER_ACTION: "ClusterAction",
             AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs", AclOperation.ALTER_CONFIGS: "AlterConfigs",
             AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite", AclOperation.CREATE_TOKENS: "CreateTokens",
             AclOperation.DESCRIBE_TOKENS: "DescribeTokens"}
_OPS = {v: k for k, v in _OP_NAMES.items()}
_PERMISSION_NAMES = {AclPermission.ALLOW: "Allow", AclPermission.DENY: "Deny"}
_PERMISSIONS = {v: k for k, v in _PERMISSION_NAMES.items()}


def encode_entries(bindings: Iterable[AclBinding]) -> bytes:
    acls = [{"principal": b.principal, "permissionType": _PERMISSION_NAMES[b.permission],
             "operation": _OP_NAMES[b.operation], "host": b.host}
            for b in sorted(bindings, key=lambda b: (b.principal, b.host, b.operation, b.permission))]
    return json.dumps({"version": 1, "acls": acls}).encode()


def decode_entries(rtype: ResourceType, name: str, pattern: PatternType, data: bytes) -> set[AclBinding]:
    doc = json.loads(data) if data else {}
    return {AclBinding(rtype, name, pattern, a["principal"], a["host"], _OPS[a["operation"]],
                       _PERMISSIONS[a["permissionType"]]) for a in doc.get("acls", [])}


class AclStore(Protocol):
    def load(self) -> set[AclBinding]: ...
    def add(self, bindings: Iterable[AclBinding]) -> None: ...
    def remove(self, bindings: Iterable[AclBinding]) -> None: ...


class LocalAclStore:
    """A single broker's ACLs: one JSON file (written .tmp, fsync, rename)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / ACL_FILE
        self._lock = threading.Lock()

    def load(self) -> set[AclBinding]:
        if not self.path.exists():
            return set()
        doc = json.loads(self.path.read_text())
        out: set[AclBinding] = set()
        for r in doc.get("resources", []):
            out |= decode_entries(_TYPES[r["resourceType"]], r["name"], PatternType[r["patternType"]],
                                  json.dumps({"acls": r["acls"]}).encode())
        return out

    def _save(self, bindings: set[AclBinding]) -> None:
        resources: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
        for b in bindings:
            resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
        doc = {"version": 1, "resources": [
            {"resourceType": _TYPE_NAMES[t], "name": n, "patternType": p.name,
             "acls": json.loads(encode_entries(bs))["acls"]}
            for (t, n, p), bs in sorted(resources.items())]}
        write_atomic(self.path, json.dumps(doc, indent=1).encode())

    def add(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            self._save(self.load() | set(bindings))

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            self._save(self.load() - set(bindings))


def _resource_path(rtype: ResourceType, name: str, pattern: PatternType) -> str:
    root = PREFIXED_ROOT if pattern is PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{_TYPE_NAMES[rtype]}/{name}"


class ZkAclStore:
    """A cluster's ACLs in ZooKeeper (kazoo client shared with the metadata store)."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def load(self) -> set[AclBinding]:
        out: set[AclBinding] = set()
        for root, pattern in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for type_name in self._children(root):
                rtype = _TYPES.get(type_name)
                if rtype is None:
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    data = self._get(f"{root}/{type_name}/{name}")
                    if data is not None:
                        out |= decode_entries(rtype, name, pattern, data)
        return out

    def watch(self, on_change: Callable[[], None]) -> None:
        """``on_change`` (called on kazoo's thread) whenever a change notification appears."""
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.zk.ensure_path(path)
            self.zk.ChildrenWatch(path, lambda _children: on_change())

    def add(self, bindings: Iterable[AclBinding]) -> None:
        self._change(bindings, adding=True)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        self._change(bindings, adding=False)

    def _change(self, bindings: Iterable[AclBinding], adding: bool) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        require_connected(self.zk, self.zk.hosts)
        by_resource: dict[tuple[ResourceType, str, PatternType], set[AclBinding]] = {}
        for b in bindings:
            if "/" in b.resource_name:  # the name is a znode's name
                raise InvalidAcl(f"resource name '{b.resource_name}' with '/' cannot be stored in ZooKeeper")
            by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), set()).add(b)
        for (rtype, name, pattern), changed in by_resource.items():
            path = _resource_path(rtype, name, pattern)
            while True:  # compare-and-set on the node's version; another broker may write meanwhile
                try:
                    data, stat = self.zk.get(path)
                    current, version = decode_entries(rtype, name, pattern, data), stat.version
                except NoNodeError:
                    current, version = set(), -1
                wanted = current | changed if adding else current - changed
                if wanted == current:
                    break
                try:
                    if version == -1:
                        self.zk.create(path, encode_entries(wanted), makepath=True)
                    elif wanted:
                        self.zk.set(path, encode_entries(wanted), version=version)
                    else:
                        self.zk.delete(path, version=version)
                    break
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
            self._notify(rtype, name, pattern)

    def _notify(self, rtype: ResourceType, name: str, pattern: PatternType) -> None:
        if pattern is PatternType.LITERAL:
            parent, payload = LITERAL_CHANGES, f"{_TYPE_NAMES[rtype]}:{name}".encode()
        else:
            parent, payload = EXTENDED_CHANGES, json.dumps(
                {"version": 1, "resourceType": _TYPE_NAMES[rtype], "name": name, "patternType": "Prefixed"}).encode()
        self.zk.create(f"{parent}/{CHANGE_PREFIX}", payload, sequence=True, makepath=True)
        self._trim(parent)

    def _trim(self, parent: str) -> None:
        from kazoo.exceptions import NoNodeError

        children = sorted(c for c in self._children(parent) if c.startswith(CHANGE_PREFIX))
        for old in children[:-KEPT_CHANGES]:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{parent}/{old}")

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _get(self, path: str) -> bytes | None:
        from kazoo.exceptions import NoNodeError

        try:
            return bytes(self.zk.get(path)[0])
        except NoNodeError:
            return None
