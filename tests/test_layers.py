"""Dependencies point down only (DESIGN.md "Layers"): checked by walking every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "strom"

# layer -> strom packages it must not import
FORBIDDEN: dict[str, set[str]] = {
    "protocol": {"records", "storage", "cluster", "coordinator", "broker", "cli", "admin", "spark", "config"},
    "records": {"protocol", "storage", "cluster", "coordinator", "broker", "cli", "admin", "spark", "config"},
    "storage": {"protocol", "cluster", "coordinator", "broker", "cli", "admin", "spark", "config"},
    "cluster": {"coordinator", "replication", "broker", "cli", "admin", "spark"},
    "replication": {"coordinator", "cli", "admin", "spark"},
    "coordinator": {"cluster", "cli", "admin", "spark"},
    "broker": {"cli", "admin", "spark"},
    # Beside cluster/ (each uses a little of the other: the ACL store's file writes, the inter-broker
    # client's TLS and SASL login): TLS, SASL, principals, ACLs; the broker uses it.
    "security": {"coordinator", "replication", "broker", "cli", "admin", "spark"},
    # Blocking client connections (kio requests, TLS, SASL login) that cli/ and spark/ share.
    "client": {"storage", "cluster", "replication", "coordinator", "broker", "cli", "admin", "spark"},
}
NO_ASYNCIO = {"protocol", "records"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_layers_point_down() -> None:
    violations = []
    checked = 0
    for layer, forbidden in FORBIDDEN.items():
        for path in (SRC / layer).rglob("*.py"):
            checked += 1
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] == "strom" and len(parts) > 1 and parts[1] in forbidden:
                    violations.append(f"{path.relative_to(SRC)} imports {name}")
                if layer in NO_ASYNCIO and parts[0] == "asyncio":
                    violations.append(f"{path.relative_to(SRC)} imports asyncio (sans-IO layer)")
    assert checked > 10
    assert violations == []


def test_coordinator_never_imports_broker() -> None:
    # coordinator/ declares what it writes through (partition_writer.py) and broker/ implements it:
    # no module of coordinator/ imports strom.broker, not even under TYPE_CHECKING (which _imports
    # walks too, as it walks the whole tree).
    offenders = []
    for path in (SRC / "coordinator").rglob("*.py"):
        offenders += [f"{path.name}: {name}" for name in _imports(path)
                      if name == "strom.broker" or name.startswith("strom.broker.")]
    assert offenders == []


def test_import_check_sees_type_checking_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from strom.broker.server import Broker\n"
                      "import strom.broker\n")
    assert {"strom.broker.server", "strom.broker"} <= _imports(module)


def test_coordinator_state_machine_is_sans_io() -> None:
    # The coordinator's pure part takes time as an argument; only the runtimes (groups, transactions,
    # the placement code they share and the writer interface they declare) run on asyncio.
    runtimes = {"group_runtime.py", "txn_runtime.py", "placement.py", "partition_writer.py"}
    offenders = [f"{path.name}: asyncio" for path in (SRC / "coordinator").rglob("*.py")
                 if path.name not in runtimes and "asyncio" in _imports(path)]
    assert offenders == []
