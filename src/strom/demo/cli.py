"""`strom demo`: runnable demonstrations."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click


@click.group()
def demo() -> None:
    """Runnable demonstrations of strom."""


@demo.command()
@click.option("--bootstrap-server", default="127.0.0.1:9092", show_default=True,
              help="Broker to use; if none answers there, an embedded strom broker is started.")
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
def trucking(bootstrap_server: str, duration: float, rate: float, speedup: float, trucks: int, output: Path,
             data_dir: Path) -> None:
    """Truck geo-events -> Spark Structured Streaming -> alerts topic and Parquet table.

    A simulator produces JSON events to truck-geo-events; a Spark job (strom source and sink) computes
    per-driver violations and average speed in event-time windows, writes alerts for risky drivers to
    truck-alerts and the windows to Parquet. The alerts are shown as they arrive.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException("the demo needs PySpark: pip install 'strom[spark]'") from None
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise click.ClickException("the demo runs Spark, which needs Java 17 or later (java not found)")
    from strom.demo.trucking.run import run_demo

    sys.exit(run_demo(bootstrap_server, duration, rate, speedup, trucks, output.resolve(), data_dir.resolve()))
