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
@click.option("--master", default="local[2]", show_default=True,
              help="Spark master: local[N], or spark://HOST:PORT of a standalone cluster whose workers can import "
                   "strom (docs/spark.md).")
@click.option("--registry", default="http://127.0.0.1:8081", show_default=True, metavar="URL",
              help="The schema registry of the broker at --bootstrap-server (an embedded broker brings its own).")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting for the demo's session (repeatable), e.g. spark.executor.memory=512m.")
@client_options
def trucking(duration: float, rate: float, speedup: float, trucks: int, output: Path, data_dir: Path,
             master: str, registry: str, spark_conf: tuple[str, ...], client: ClientOptions) -> None:
    """Truck geo-events -> Spark Structured Streaming -> alerts topic and Parquet table.

    A simulator produces Avro events (AvroSerializer, the broker's schema registry) to truck-geo-events;
    a Spark job (strom source, from_avro, strom sink) computes
    per-driver violations and average speed in event-time windows, writes alerts for risky drivers to
    truck-alerts and the windows to Parquet. The alerts are shown as they arrive. If no broker answers
    at --bootstrap-server, an embedded strom broker is started. Spark runs in this process (local[2])
    or on the standalone cluster given by --master; its own log goes to <output>/spark.log.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException("the demo needs PySpark: run it with `make demo`, or pip install 'strom[spark]'") from None
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise click.ClickException("the demo runs Spark, which needs Java 17 or later (java not found)")
    conf: dict[str, str] = {}
    for item in spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--spark-conf")
        conf[key.strip()] = value
    from strom.demo.trucking.run import NoRegistry, run_demo
    from strom.spark import WorkerSetupError

    try:
        code = run_demo(client, duration, rate, speedup, trucks, output.resolve(), data_dir.resolve(),
                        master=master, spark_conf=conf, registry=registry)
    except (WorkerSetupError, NoRegistry) as e:  # Spark's Python workers cannot import strom: one line, no trace
        raise click.ClickException(str(e)) from None
    sys.exit(code)
