"""librdkafka's own integration tests against strom: librdkafka 2.0.2's test-runner (built by
`make deps` from Debian's source package, see the Makefile) runs each listed test against a strom
broker of its own, and each is one pytest test here, named after it. A test passes when the runner
says it passed, ran the sub-tests it has (none skipped) and exited 0 within its time limit.

tests/rdkafka_runner.py runs any librdkafka test by hand; docs/testing.md lists which pass today.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from rdkafka_runner import BUILD_DIR, missing_runner_message, run_against_new_broker, runner_path


@dataclass(frozen=True)
class Case:
    name: str  # the test's name in librdkafka's tests/test.c
    subtests: str | None = None  # only the sub-tests whose name contains this (SUBTESTS)
    quick: bool = False  # the runner's quick mode (-Q): fewer sub-tests, less data
    timeout: float = 60.0  # seconds for the runner; the pytest time limit adds a minute to it
    scenario: str = "default"  # "noautocreate": a broker with auto.create.topics.enable=false
    passes: int | None = None  # how many sub-test passes the runner must report, when fixed

    @property
    def id(self) -> str:
        return self.name + (f"[{self.subtests}]" if self.subtests else "")


# Issue #13: librdkafka's admin test for ACLs (0081_admin's CreateAcls, DescribeAcls, DeleteAcls,
# each for ACL binding versions 0 and 1 and from a producer and a consumer client).
ACL_CASES = [Case("0081_admin", subtests=sub, passes=4) for sub in ("CreateAcls", "DescribeAcls", "DeleteAcls")]

CASES = ACL_CASES


def _uses_subtests(name: str) -> bool:
    """Whether the test's source marks sub-tests: one that does must run at least one here."""
    sources = list((BUILD_DIR / "tests").glob(name[:4] + "-*.c*"))
    return any(re.search(r"\bSUB_TEST(_QUICK)?\(", p.read_text(errors="replace")) for p in sources)


@pytest.fixture(scope="module", autouse=True)
def _runner_built() -> None:
    if not runner_path().exists():
        pytest.fail(missing_runner_message(), pytrace=False)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.timeout(c.timeout + 60))
                                  for c in CASES])
def test_librdkafka(case: Case, tmp_path: Path) -> None:
    result, broker = run_against_new_broker(case.name, tmp_path, scenario=case.scenario, subtests=case.subtests,
                                            quick=case.quick, timeout=case.timeout)
    report = (f"{result.summary()}\n--- librdkafka test-runner (last 80 lines) ---\n{result.tail()}\n"
              "--- strom broker log (last 40 lines) ---\n" + "\n".join(broker.log_lines[-40:]))
    assert result.returncode is not None, f"timed out after {case.timeout}s\n{report}"
    assert result.passed, report
    assert not result.subtests_skipped, f"sub-tests skipped: {result.subtests_skipped}\n{report}"
    if case.subtests or _uses_subtests(case.name):
        assert result.subtests_passed, f"no sub-test ran\n{report}"
    if case.passes is not None:
        assert len(result.subtests_passed) == case.passes, f"sub-tests passed: {result.subtests_passed}\n{report}"
