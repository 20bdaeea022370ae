"""Spark test fixtures: one local[2] SparkSession shared by all Spark tests (one JVM start)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    # C1 only: the JVM starts and warms up faster; these tests move little data.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -Xss4m",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from strom.spark import local_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = local_session("strom-tests", "local[2]", **SPARK_CONF)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
