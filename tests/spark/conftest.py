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
    "spark.python.worker.faulthandler.enabled": "true",  # a crashed Python worker shows its stack
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


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster (master and two 1-core workers on 127.0.0.1), stopped at the end
    of the module whatever happens; its logs stay in the module's tmp directory."""
    from sparkcluster import SparkStandalone

    with SparkStandalone(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """When a test on the standalone cluster fails, attach the daemons' and executors' log tails."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        cluster = getattr(item, "funcargs", {}).get("spark_cluster")
        if cluster is not None:
            report.sections.append(("spark standalone cluster logs", cluster.logs(15)))
