"""strom's PySpark connector: a data source named "strom" with the options of Spark's Kafka source.

    from strom.spark import register
    register(spark)
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Install with `pip install strom[spark]` (pyspark >= 4.2, pyarrow). See docs/spark.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from strom.spark.fetch import DataLossError
from strom.spark.options import OptionError
from strom.spark.source import StromDataSource, source_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DataLossError", "OptionError", "StromDataSource", "local_session", "register", "source_schema"]


def register(spark: SparkSession) -> None:
    """Make format("strom") available in this Spark session (read, readStream, write, writeStream)."""
    spark.dataSource.register(StromDataSource)


def local_session(app_name: str = "strom", master: str = "local[2]", **conf: str) -> SparkSession:
    """A local SparkSession whose Python workers run this interpreter, with the source registered.

    Spark starts its Python workers with $PYSPARK_PYTHON (default: `python3` on the PATH), which must
    be able to import strom; this points it at the running interpreter unless it is already set.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
