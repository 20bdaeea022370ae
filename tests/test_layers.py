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
    # replication/ and coordinator/ declare what they need of the broker (ReplicaStates, FetcherHost,
    # PartitionWriter) and broker/ implements it: neither imports broker/, type-only imports included.
    "replication": {"coordinator", "broker", "cli", "admin", "spark"},
    "coordinator": {"cluster", "replication", "broker", "cli", "admin", "spark"},
    # Share partitions and sessions (KIP-932): a ShareHost and a Persister they declare; the broker
    # implements both (broker/share_host.py).
    "share": {"cluster", "replication", "coordinator", "broker", "cli", "admin", "spark"},
    "broker": {"cli", "admin", "spark"},
    # Beside cluster/ (each uses a little of the other: the ACL store's file writes, the inter-broker
    # client's TLS and SASL login): TLS, SASL, principals, ACLs; the broker uses it.
    "security": {"coordinator", "replication", "broker", "cli", "admin", "spark"},
    # Blocking client connections (kio requests, TLS, SASL login) that cli/ and spark/ share.
    "client": {"storage", "cluster", "replication", "coordinator", "broker", "cli", "admin", "spark"},
    # The schema registry: a part of its own over a SchemaLog it declares (broker/schema_log.py is
    # the broker's side, admin/registry.py wires it); it sees none of the broker.
    "registry": {"storage", "cluster", "replication", "coordinator", "broker", "cli", "admin", "spark", "security",
                 "client", "protocol", "records"},
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


def test_import_check_sees_type_checking_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from strom.broker.server import Broker\n"
                      "import strom.broker\n")
    assert {"strom.broker.server", "strom.broker"} <= _imports(module)


def test_coordinator_state_machine_is_sans_io() -> None:
    # The coordinator's pure part takes time as an argument; only the runtimes (groups, transactions,
    # the placement code they share and the writer interface they declare) run on asyncio.
    runtimes = {"group_runtime.py", "txn_runtime.py", "share_runtime.py", "placement.py", "partition_writer.py"}
    offenders = [f"{path.name}: asyncio" for path in (SRC / "coordinator").rglob("*.py")
                 if path.name not in runtimes and "asyncio" in _imports(path)]
    assert offenders == []


def _module_graph() -> dict[str, set[str]]:
    """strom's modules and the strom modules each imports (type-only imports included). ``from
    strom.pkg import mod`` is an edge to the submodule ``strom.pkg.mod`` when there is one."""
    modules: dict[str, Path] = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(known(a.name) for a in node.names if a.name.startswith("strom."))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("strom"):
                assert node.module is not None
                edges.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else known(node.module)
                             for a in node.names)
        graph[name] = {e for e in edges if e is not None and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    graph = _module_graph()
    assert len(graph) > 100
    assert "strom.broker.cluster_node" in graph["strom.broker.server"]  # an import under TYPE_CHECKING
    assert _cycles(graph) == []


def test_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
