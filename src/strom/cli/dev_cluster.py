"""`strom dev-cluster N`: ZooKeeper and N brokers on this machine, for trying the cluster out."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("dev-cluster")
@click.argument("brokers", type=click.IntRange(1, 9), default=3)
@click.option("--base-port", type=int, default=9092, show_default=True,
              help="Broker i listens on base-port + i - 1 (127.0.0.1).")
@click.option("--zookeeper-port", type=int, default=None, help="ZooKeeper's port (default: a free one).")
@click.option("--registry-port", type=int, default=8081, show_default=True,
              help="Broker i serves the schema registry on registry-port + i - 1 (127.0.0.1); 0: none.")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("strom-cluster-data"), show_default=True,
              help="ZooKeeper's and every broker's data, kept between runs.")
def dev_cluster(brokers: int, base_port: int, zookeeper_port: int | None, registry_port: int,
                data_dir: Path) -> None:
    """Start Debian's ZooKeeper and BROKERS strom brokers on 127.0.0.1, each with its schema registry;
    Ctrl-C stops them all."""
    from strom.devcluster import DevClusterError, run_dev_cluster

    try:
        run_dev_cluster(brokers, base_port, data_dir, zookeeper_port, registry_port or None)
    except DevClusterError as e:
        click.echo(f"strom: {e}", err=True)
        sys.exit(1)
