"""The test files in docs/testing.md (each Python block that starts with ``# test_<name>.py``) run as
they are written, in a temporary project, with the plugin's fixtures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(400)

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"


def doc_test_files() -> dict[str, str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return {m.group(1): block for block in blocks if (m := re.match(r"# (test_\w+\.py)\n", block))}


def test_the_recipes_in_docs_testing_md_pass(tmp_path: Path) -> None:
    files = doc_test_files()
    assert set(files) >= {"test_first.py", "test_consumer_survives_a_leader_change.py",
                          "test_producer_survives_a_crash.py", "test_aiokafka_group.py", "test_spark_counts.py"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider --strict-markers\ntimeout = 300\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STROM_"))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "--junitxml", "report.xml"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=380)
    suite = ET.parse(tmp_path / "report.xml").getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": len(files), "failures": 0, "errors": 0, "skipped": 0}, result.stdout[-6000:]
