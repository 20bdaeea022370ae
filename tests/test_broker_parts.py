"""The broker's parts take what they use (DESIGN.md "Wave 3"): none imports broker/server.py, and the
config that dynamic broker configs change reaches them through one LiveConfig."""

from __future__ import annotations

import ast
from pathlib import Path

from strom.config import BrokerConfig, LiveConfig

BROKER = Path(__file__).resolve().parent.parent / "src" / "strom" / "broker"
PARTS = ["acceptor", "acls", "cluster_node", "config_admin", "connection", "coordinator_host", "faults",
         "log_maintenance", "quota_manager", "topics", "txn_markers"]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):  # under `if TYPE_CHECKING:` too
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_parts_do_not_import_the_server() -> None:
    offenders = [part for part in PARTS if "strom.broker.server" in _imports(BROKER / f"{part}.py")]
    assert offenders == []


def test_live_config_replaces_and_tells_subscribers_in_order(tmp_path: Path) -> None:
    first = BrokerConfig.load(None, [f"log.dirs={tmp_path}"])
    second = first.with_dynamic({"log.retention.ms": "60000"}, {})
    live = LiveConfig(first)
    heard: list[tuple[str, BrokerConfig]] = []
    live.subscribe(lambda c: heard.append(("a", c)))
    cancel = live.subscribe(lambda c: heard.append(("b", c)))
    assert live.value is first
    live.replace(second)
    assert live.value is second and heard == [("a", second), ("b", second)]
    cancel()
    live.replace(first)
    assert live.value is first and heard[2:] == [("a", first)]
