"""`strom demo`: runnable demonstrations."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from strom.cli.common import ClientOptions, client_options, connection_options


@click.group()
@connection_options
def demo() -> None:
    """Runnable demonstrations of strom."""


@demo.command()
@click.option("--duration", type=float, default=120.0, show_default=True,
              help="Seconds to run (0: until Ctrl-C).")
@click.option("--rate", type=float, default=40.0, show_default=True, help="Events per second.")
@click.option("--speedup", type=float, default=10.0, show_default=True,
              help="How much faster event time runs than the clock.")
@click.option("--trucks", type=click.IntRange(1, 12), default=8, show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=Path("strom-demo-output"), show_default=True,
              help="Parquet table and checkpoints (emptied at start).")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("strom-data-demo"), show_default=True,
              help="Data directory of the embedded broker.")
@client_options
def trucking(duration: float, rate: float, speedup: float, trucks: int, output: Path, data_dir: Path,
             client: ClientOptions) -> None:
    """Truck geo-events -> Spark Structured Streaming -> alerts topic and Parquet table.

    A simulator produces JSON events to truck-geo-events; a Spark job (strom source and sink) computes
    per-driver violations and average speed in event-time windows, writes alerts for risky drivers to
    truck-alerts and the windows to Parquet. The alerts are shown as they arrive. If no broker answers
    at --bootstrap-server, an embedded strom broker is started.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException("the demo needs PySpark: run it with `make demo`, or pip install 'strom[spark]'") from None
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise click.ClickException("the demo runs Spark, which needs Java 17 or later (java not found)")
    from strom.demo.trucking.run import run_demo

    sys.exit(run_demo(client, duration, rate, speedup, trucks, output.resolve(), data_dir.resolve()))
