"""strom.spark.register checks that Spark's Python workers can import strom: a session whose
PYSPARK_PYTHON is a system interpreter without strom stops with one line saying what to change,
not with a worker's ModuleNotFoundError inside a Java stack trace at the first query."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sparkcluster import strom_src

SYSTEM_PYTHON = "/usr/bin/python3"

# The driver imports this checkout's strom through sys.path, not PYTHONPATH: the workers inherit the
# driver's environment, and must see only what the system interpreter has.
SCRIPT = f"""
import sys
sys.path.insert(0, {strom_src()!r})
from pyspark.sql import SparkSession
import strom.spark
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1").getOrCreate())
try:
    strom.spark.register(spark)
finally:
    spark.stop()
"""


@pytest.mark.timeout(120)
def test_workers_without_strom_stop_with_one_line() -> None:
    # The premise: the system interpreter has no strom (but it runs PySpark's worker, shipped as a zip).
    check = subprocess.run([SYSTEM_PYTHON, "-c", "import importlib.util; print(importlib.util.find_spec('strom'))"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert check.stdout.strip() == "None", check

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=SYSTEM_PYTHON, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=110)
    assert proc.returncode != 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("strom.spark.WorkerSetupError: Spark's Python workers (/usr/bin/python3) cannot import "
                           "strom"), proc.stderr
    assert "PYSPARK_PYTHON" in last and "strom.spark.local_session()" in last, last
    # Nothing of the worker's failure or of Py4J reaches the user.
    for noise in ("ModuleNotFoundError", "Py4J", "\tat org.apache"):
        assert noise not in proc.stderr, proc.stderr
