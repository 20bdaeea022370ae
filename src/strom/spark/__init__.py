"""strom's PySpark connector: a data source named "strom" with the options of Spark's Kafka source.

    from strom.spark import register
    register(spark)
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Typed records: `from_avro(col, subject=..., registry_url=...)` and `to_avro(...)` decode and encode
Confluent-framed Avro with schemas from a schema registry (docs/schema-registry.md).

Install with `pip install strom[spark]` (pyspark >= 4.2, pyarrow). See docs/spark.md.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

from strom.spark import jvm
from strom.spark.avro import from_avro, to_avro
from strom.spark.avro_codec import AvroDecodeError
from strom.spark.fetch import DataLossError
from strom.spark.options import OptionError
from strom.spark.source import StromDataSource, source_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["AvroDecodeError", "DataLossError", "OptionError", "StromDataSource", "WorkerSetupError", "from_avro",
           "local_session", "register", "source_schema", "to_avro"]


class WorkerSetupError(RuntimeError):
    """Spark's Python workers cannot import strom; the message is one line saying what to change."""


def register(spark: SparkSession, check_workers: bool = True) -> None:
    """Make format("strom") available in this Spark session (read, readStream, write, writeStream).

    With `check_workers` (the default), a one-task job first checks that Spark's Python workers can
    import strom, and raises WorkerSetupError if they cannot: otherwise the first query fails later
    with a worker's ModuleNotFoundError buried in a Java stack trace.
    """
    if check_workers:
        _check_workers(spark)
    spark.dataSource.register(StromDataSource)


def _check_workers(spark: SparkSession) -> None:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext on this side; its server has its own workers
        return
    python = sc.pythonExec or "python3"
    # Workers of a local master that run this very interpreter share its environment: nothing to check.
    # (Resolved names, not real paths: a virtualenv's python is a link to a system interpreter.)
    local = (sc.master or "").startswith("local")
    if local and os.path.abspath(shutil.which(python) or python) == sys.executable:
        return

    # Nested, so cloudpickle ships it by value: the worker must not need strom to run the check.
    def probe(_: int) -> tuple[bool, str]:
        import importlib.util
        import sys

        return importlib.util.find_spec("strom") is not None, sys.executable

    fix = ("set PYSPARK_PYTHON (or spark.pyspark.python) to an interpreter with strom installed on every "
           "worker, or build a local session with strom.spark.local_session()")
    if local and shutil.which(python) is None:
        raise WorkerSetupError(f"Spark's Python workers would run {python}, which is not an executable: {fix}")
    try:
        results = sc.parallelize([0], 1).map(probe).collect()
    except Exception as e:
        raise WorkerSetupError(f"Spark's Python workers ({python}) could not run a check for strom "
                               f"({_cause(e)}): {fix}") from None
    missing = [exe for found, exe in results if not found]
    if missing:
        raise WorkerSetupError(f"Spark's Python workers ({missing[0]}) cannot import strom: {fix}")


def _cause(e: Exception) -> str:
    """The one line of a failed job that says why: a Python exception's last line, or the task's error."""
    lines = [line.strip() for line in str(e).splitlines()]
    for line in lines:
        if re.match(r"^[A-Za-z_]\w*(Error|Exception): ", line):
            return line[:200]
    for line in lines:
        if "most recent failure:" in line and "): " in line:
            return line.split("): ", 1)[1][:200]
    return (lines[0] if lines else type(e).__name__)[:200]


def local_session(app_name: str = "strom", master: str = "local[2]", **conf: str) -> SparkSession:
    """A local SparkSession whose Python workers run this interpreter, with the source registered.

    Spark starts its Python workers with $PYSPARK_PYTHON (default: `python3` on the PATH), which must
    be able to import strom; this points it at the running interpreter unless it is already set.
    strom's jar (`make jvm`, strom.spark.jvm), when built, is added to spark.jars.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    settings = {key.replace("__", "."): value for key, value in conf.items()}
    jars = jvm.with_jar(settings.get("spark.jars"))  # from_avro decodes in the JVM where the jar is built
    if jars:
        settings["spark.jars"] = jars
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
