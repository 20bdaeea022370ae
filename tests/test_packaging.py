"""`make run` installs `pip install .` (the base set): what the broker and the strom command need, and
nothing of Spark, the browser driver, the linters or the test clients, so a newcomer's first start is
small and fast. Checked by resolving that install for a fresh virtualenv with pip's dry run (metadata
only, nothing is installed), against the package index the machine is configured for."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Kept out of the base set: Spark (`make demo`), the browser driver, linters and type checker, test runners
# and the other test clients.
NOT_IN_BASE = {"pyspark", "py4j", "pyarrow", "playwright", "greenlet", "pytest", "pytest-timeout", "hypothesis",
               "mypy", "ruff", "kafka-python", "aiokafka", "py-spy"}
# What the broker and the strom command do need: if these were missing, the check would prove nothing.
IN_BASE = {"strom", "kio", "crc32c", "cramjam", "aiohttp", "prometheus-client", "click", "rich",
           "javaproperties", "confluent-kafka",
           "fastavro", "jsonschema", "protobuf", "grpcio-tools"}  # the schema registry `make run` turns on


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


@pytest.mark.timeout(420)
def test_base_install_is_only_what_the_broker_needs(tmp_path: Path) -> None:
    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(fresh)  # nothing installed: pip resolves everything from scratch
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fresh / "bin" / "python"), "install", "--dry-run",
         "--quiet", "--report", str(report), str(ROOT)],
        capture_output=True, text=True, timeout=360,
    )
    assert proc.returncode == 0, proc.stderr
    names = {_normalized(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert names >= IN_BASE, f"missing from the base set: {sorted(IN_BASE - names)}"
    assert not names & NOT_IN_BASE, f"`pip install .` pulls {sorted(names & NOT_IN_BASE)}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("target", "installs", "not_installs"), [
    ("run", ["-e ."], ["[spark]", "[test]"]),
    ("demo", ["-e .", "-e '.[spark]'"], ["[test]"]),
    ("test", ["-e .", "-e '.[test]'"], ["[spark]"]),
])
def test_make_targets_install_their_own_set(tmp_path: Path, target: str, installs: list[str],
                                            not_installs: list[str]) -> None:
    """What each make target would install into a virtualenv that does not exist yet (make -n: nothing runs).

    librdkafka's test build is taken as done (-o): its recipe calls $(MAKE), which even `make -n` runs."""
    version = re.search(r"^RDKAFKA_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert version, "RDKAFKA_VERSION not found in the Makefile"
    stamp = f".cache/librdkafka/librdkafka-{version[1]}/.strom-built"
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "-o", stamp, target, f"VENV={tmp_path / 'venv'}"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    pip_lines = [line for line in proc.stdout.splitlines() if "bin/pip install" in line and "--upgrade pip" not in line]
    assert [line.split(" install -q ", 1)[1] for line in pip_lines] == installs, proc.stdout
    assert not any(extra in proc.stdout for extra in not_installs), proc.stdout
