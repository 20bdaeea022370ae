"""``strom cluster``: the brokers, the controller, and the partitions that need attention.

What Kafka users piece together from ``kafka-broker-api-versions`` (the brokers) and ``kafka-topics
--describe --under-replicated-partitions`` / ``--unavailable-partitions``, in one look. Built on
confluent-kafka's AdminClient, so it works against any Kafka-compatible cluster: the brokers and
the controller from DescribeCluster (with racks), the partitions from Metadata.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import click
from rich.table import Table

from strom.cli.common import (
    ClientOptions,
    StromCommand,
    admin_client,
    client_options,
    fetch_metadata,
    out_console,
)

REQUEST_TIMEOUT = 15.0


@dataclass(frozen=True)
class BrokerRow:
    id: int
    host: str
    port: int
    rack: str | None
    controller: bool


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        """A leader, but fewer in-sync replicas than replicas (an offline partition is listed as such)."""
        return not self.offline and len(self.isr) < len(self.replicas)


def _brokers(admin: Any, md: Any) -> tuple[list[BrokerRow], int]:
    """The live brokers with their racks, and the controller's id (-1: none). A cluster that cannot
    describe itself still has Metadata's brokers, only without racks."""
    try:
        described = admin.describe_cluster(request_timeout=REQUEST_TIMEOUT).result(REQUEST_TIMEOUT + 5)
        controller = described.controller.id if described.controller is not None else -1
        nodes = [(n.id, n.host, n.port, n.rack or None) for n in described.nodes]
    except Exception:
        controller = md.controller_id
        nodes = [(b.id, b.host, b.port, None) for b in md.brokers.values()]
    rows = [BrokerRow(i, host, port, rack, i == controller) for i, host, port, rack in sorted(nodes)]
    return rows, controller


def _partitions(md: Any) -> list[PartitionRow]:
    return [PartitionRow(name, p.id, p.leader, list(p.replicas), list(p.isrs))
            for name in sorted(md.topics) for p in sorted(md.topics[name].partitions.values(), key=lambda p: p.id)]


def _print(cluster_id: str | None, controller: int, brokers: list[BrokerRow], partitions: list[PartitionRow],
           under: list[PartitionRow], offline: list[PartitionRow]) -> None:
    console = out_console()
    console.print(f"[bold]Cluster id:[/bold] {cluster_id or '?'}   [bold]Controller:[/bold] "
                  f"{controller if controller >= 0 else 'none'}   [bold]Brokers:[/bold] {len(brokers)}   "
                  f"[bold]Partitions:[/bold] {len(partitions)}", highlight=False)
    table = Table(title="Brokers", title_justify="left")
    table.add_column("ID", justify="right")
    table.add_column("Host:port")
    table.add_column("Rack")
    table.add_column("Controller")
    for b in brokers:
        table.add_row(str(b.id), f"{b.host}:{b.port}", b.rack or "-", "yes" if b.controller else "")
    console.print(table)
    for title, rows in (("Under-replicated partitions", under), ("Offline partitions", offline)):
        if not rows:
            console.print(f"{title}: none", highlight=False)
            continue
        t = Table(title=f"{title}: {len(rows)}", title_justify="left")
        for col in ("Topic", "Partition", "Leader", "Replicas", "ISR"):
            t.add_column(col, justify="right" if col in ("Partition", "Leader") else "left")
        for p in rows:
            t.add_row(p.topic, str(p.partition), str(p.leader) if p.leader >= 0 else "none",
                      ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)))
        console.print(t)


@click.command("cluster", cls=StromCommand)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def cluster(as_json: bool, client: ClientOptions) -> None:
    """The brokers (which one is the controller) and the under-replicated and offline partitions."""
    admin = admin_client(client)
    md = fetch_metadata(admin, client)
    brokers, controller = _brokers(admin, md)
    partitions = _partitions(md)
    under = [p for p in partitions if p.under_replicated]
    offline = [p for p in partitions if p.offline]
    cluster_id = getattr(md, "cluster_id", None)
    if as_json:
        click.echo(json.dumps({
            "cluster_id": cluster_id, "controller_id": controller, "brokers": [asdict(b) for b in brokers],
            "partitions": len(partitions), "under_replicated_partitions": [asdict(p) for p in under],
            "offline_partitions": [asdict(p) for p in offline]}, indent=2))
        return
    _print(cluster_id, controller, brokers, partitions, under, offline)
