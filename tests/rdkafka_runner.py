"""Run librdkafka's own integration tests against a strom broker.

librdkafka's test programs are built by `make deps` from Debian's `librdkafka` source package into
``.cache/librdkafka/`` (see the Makefile). Each run here starts one strom broker subprocess, writes
the test-runner's ``test.conf`` for it and runs one librdkafka test (``TESTS=0081``), optionally
only the sub-tests whose name contains a string (``SUBTESTS=Acls``), with a time limit.

By hand (from the repository root, after `make deps`)::

    .venv/bin/python tests/rdkafka_runner.py 0081_admin --subtests Acls
    .venv/bin/python tests/rdkafka_runner.py 0001 0012 0107_topic_recreate --full   # one broker each
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from brokerproc import BrokerProcess, die_with_parent_hook  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LIBRDKAFKA_VERSION = "2.8.0"  # Debian 13's librdkafka; the Makefile's RDKAFKA_VERSION
BUILD_DIR = Path(os.environ.get("STROM_LIBRDKAFKA_DIR",
                                REPO / ".cache" / "librdkafka" / f"librdkafka-{LIBRDKAFKA_VERSION}"))
# The Kafka version the test-runner gates its tests on (test_broker_version): Kafka 4.0's, as strom
# serves Kafka 4's APIs. Against 2.8.0's tests, 4.0.0 differs from the 3.1.0 this suite was first
# measured with in one place only: AlterConfigs helpers leave out a read-back config they set
# themselves (Kafka >= 3.2 refuses a duplicate); no test of 2.8.0 needs a Kafka newer than 3.1.
KAFKA_VERSION = "4.0.0"
# The broker's settings: the ACL authorizer on (0081_admin's CreateAcls/DescribeAcls/DeleteAcls
# need one; 0115 and 0119 add ACLs that deny User:* a topic) and, as in librdkafka's own test
# clusters, everyone allowed what no ACL covers. PLAINTEXT clients are User:ANONYMOUS.
BROKER_OVERRIDES = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    # Kafka's default, as librdkafka's test clusters run (the tests' brokers otherwise get 0 ms):
    # 0113 and 0118 count rebalances that depend on members joining the first generation together.
    "group.initial.rebalance.delay.ms": "3000",
}
JAVA_SHIM = Path(__file__).resolve().parent / "rdkafka_java" / "transaction_producer_cli.py"
SHIM = Path(__file__).resolve().parent / "kafka_tools_shim.py"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUB_PASS = re.compile(r"\[ (\S+?:\d+)(?:: [^\]]*?)?: PASS \(")
_SUB_SKIP = re.compile(r"\[ (\S+?:\d+)(?:: [^\]]*?)?: SKIP: ")


def runner_path() -> Path:
    return BUILD_DIR / "tests" / "test-runner"


def missing_runner_message() -> str:
    return (f"librdkafka's test-runner is not built ({runner_path()} is missing): "
            "run `make deps` (it builds librdkafka's tests from Debian's source package)")


SCENARIOS = {
    # librdkafka's tests/scenarios/*.json, as broker settings (one broker: replication factor 1).
    "default": {"auto.create.topics.enable": "true", "num.partitions": "4"},
    "noautocreate": {"auto.create.topics.enable": "false", "num.partitions": "4"},
}


def known_tests() -> dict[str, tuple[str, str]]:
    """librdkafka's tests, from its tests/test.c: name -> (flags, scenario)."""
    src = (BUILD_DIR / "tests" / "test.c").read_text()
    table = src[src.index("struct test tests[] = {"):]
    table = table[:table.index("{NULL}")]
    found = {}
    for entry in table.split("_TEST(")[1:]:
        m = re.match(r"(\w+),\s*([^,)]+)", entry)
        if m:
            scenario = re.search(r'\.scenario\s*=\s*"([^"]+)"', entry)
            found[m.group(1)] = (m.group(2).strip(), scenario.group(1).split(",")[0] if scenario else "default")
    return found


@dataclass
class Result:
    test: str  # a test's full name ("0081_admin"), or a number ("0081") for all that ran of it
    returncode: int | None  # None: killed at the time limit
    states: dict[str, str]  # the runner's report: test name -> PASSED, FAILED, SKIPPED, RUNNING, DNS
    failure: str
    duration: float  # seconds, wall clock of the runner
    output: str
    subtests_passed: list[str] = field(default_factory=list)
    subtests_skipped: list[str] = field(default_factory=list)

    @property
    def state(self) -> str | None:
        if "_" in self.test:
            return self.states.get(self.test)
        ran = {s for name, s in self.states.items() if name.startswith(self.test + "_") and s != "SKIPPED"}
        return ("FAILED" if "FAILED" in ran else "RUNNING" if "RUNNING" in ran else
                "PASSED" if ran == {"PASSED"} else "SKIPPED" if not ran else ",".join(sorted(ran)))

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and self.state == "PASSED"

    def summary(self) -> str:
        if self.returncode is None:
            return f"{self.test}: TIMED OUT after {self.duration:.0f}s"
        what = self.state or f"no report, exit code {self.returncode}"
        extra = f": {self.failure}" if self.failure and not self.passed else ""
        return f"{self.test}: {what} in {self.duration:.1f}s{extra}"

    def tail(self, lines: int = 80) -> str:
        # The runner's once-a-second "N test(s) running" line would fill the tail of a test that hangs.
        kept = [ln for ln in self.output.splitlines() if not _STATUS_LINE.search(ln)]
        return "\n".join(kept[-lines:])


_STATUS_LINE = re.compile(r"^\[<MAIN>\s+/\s*[\d.]+s\] \d+ test\(s\) running")


def _read_report(path: Path) -> dict[str, str]:
    """Each test's state from the runner's report. The runner writes some text in it unescaped,
    so a quote there breaks the JSON: a regular expression reads the states then."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    try:
        return {name: entry["state"] for name, entry in json.loads(text)["tests"].items() if name != "<MAIN>"}
    except (ValueError, KeyError, TypeError):
        return dict(re.findall(r'"name": "(\d{4}_\w+)", "state": "([A-Z]+)"', text))


def _failure_lines(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines()
             if re.search(r"TEST FAILURE|Test failure|FAILED|assert|Assert", ln)]
    return " | ".join(dict.fromkeys(lines))[:800]


def run_test(test: str, bootstrap: str, workdir: Path, *, scenario: str = "default", subtests: str | None = None,
             quick: bool = True, timeout: float = 120.0, conf: dict[str, str] | None = None,
             group_protocol: str | None = None) -> Result:
    """Run librdkafka test ``test`` ("0081_admin", or "0081" for all of that number) against the
    broker at ``bootstrap``; ``workdir`` holds test.conf, the report and whatever the test writes.
    ``group_protocol`` "consumer" makes the test's consumers use the consumer group protocol
    (KIP-848) instead of the classic one (librdkafka's TEST_CONSUMER_GROUP_PROTOCOL)."""
    runner = runner_path()
    if not runner.exists():
        raise RuntimeError(missing_runner_message())
    # The runner's working directory is a tests/ beside a src/ (a link to the build's), as in the
    # source tree: some tests read files from ../src (0053's statistics JSON schema).
    (workdir / "tests").mkdir(parents=True, exist_ok=True)
    if not (workdir / "src").exists():
        (workdir / "src").symlink_to(BUILD_DIR / "src")
    settings = {"bootstrap.servers": bootstrap,
                # A Python broker on a busy 2-core machine: twice the runner's own timeouts.
                "test.timeout.multiplier": "2",
                # KIP-714 client metrics, which strom does not ask for. With them on, librdkafka
                # 2.8.0's rd_kafka_destroy() can miss the wake-up of its telemetry shutdown and wait
                # its full second (fixed upstream later), failing 0001_multiobj's timing check.
                "enable.metrics.push": "false"}
    settings.update(conf or {})
    (workdir / "test.conf").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    report = workdir / "report.json"
    # $KAFKA_PATH/bin/kafka-topics.sh and kafka-acls.sh, which some tests run, answered by strom's CLI.
    kafka_bin = workdir / "kafka" / "bin"
    kafka_bin.mkdir(parents=True, exist_ok=True)
    for tool in ("kafka-topics.sh", "kafka-acls.sh"):
        (kafka_bin / tool).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SHIM}" {tool} "$@"\n')
        (kafka_bin / tool).chmod(0o755)
    # 0098_consumer_txn runs `make -s java`, then java/run-class.sh TransactionProducerCli ...: the
    # Java program is replaced by a confluent-kafka port (Kafka's jars cannot be fetched here).
    tests_dir = workdir / "tests"
    (tests_dir / "Makefile").write_text("java:\n\t@true\n")
    (tests_dir / "java").mkdir(exist_ok=True)
    run_class = tests_dir / "java" / "run-class.sh"
    run_class.write_text(f'#!/bin/sh\n[ "$1" = TransactionProducerCli ] || {{ echo "no $1 here" >&2; exit 1; }}\n'
                         f'shift\nexec "{sys.executable}" "{JAVA_SHIM}" "$@"\n')
    run_class.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TESTS", "SUBTESTS", "TESTS_SKIP")}
    env.update({
        "TESTS": test[:4],
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "RDKAFKA_TEST_CONF": str(workdir / "test.conf"),
        "TEST_REPORT": str(report),
        "KAFKA_PATH": str(workdir / "kafka"),
        "BROKERS": bootstrap,
        "RDKAFKA_GITVER": f"librdkafka-{LIBRDKAFKA_VERSION}",
        "LD_LIBRARY_PATH": f"{BUILD_DIR / 'src'}:{BUILD_DIR / 'src-cpp'}",
    })
    if subtests:
        env["SUBTESTS"] = subtests
    if group_protocol:
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = group_protocol
    else:
        env.pop("TEST_CONSUMER_GROUP_PROTOCOL", None)
    # -p1: one test at a time; -L: not the broker-less variants of a number; -s: the scenario the
    # broker was started for; -Q: quick mode (fewer iterations, less data), as librdkafka's CI runs.
    args = [str(runner), "-p1", "-L", "-s", scenario] + (["-Q"] if quick else [])
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=workdir / "tests", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent_hook())
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    duration = time.monotonic() - start
    output = _ANSI.sub("", out.decode(errors="replace"))
    result = Result(test=test, returncode=rc, states=_read_report(report), failure="", duration=duration,
                    output=output, subtests_passed=_SUB_PASS.findall(output),
                    subtests_skipped=_SUB_SKIP.findall(output))
    if not result.passed:
        result.failure = _failure_lines(output)
    return result


def run_against_new_broker(test: str, workdir: Path, *, scenario: str = "default",
                           overrides: dict[str, str] | None = None, **kw: object) -> tuple[Result, BrokerProcess]:
    """Start a strom broker of its own for ``test`` (set up for ``scenario``), run it, stop the broker."""
    settings = {**BROKER_OVERRIDES, **SCENARIOS[scenario], **(overrides or {})}
    broker = BrokerProcess(workdir / "broker-data", overrides=settings)
    broker.start()
    try:
        result = run_test(test, broker.bootstrap, workdir / "runner", scenario=scenario, **kw)  # type: ignore[arg-type]
    finally:
        broker.stop()
    return result, broker


def run_against_new_cluster(test: str, workdir: Path, *, size: int = 3, scenario: str = "default",
                            overrides: dict[str, str] | None = None, **kw: object) -> tuple[Result, str]:
    """Start a cluster of its own for ``test`` (ZooKeeper and ``size`` strom brokers, as in
    tests/cluster), run the test against it, stop it; returns the result and the brokers' log tails.
    For the tests that create topics with replication factor 3, as librdkafka's test clusters allow."""
    sys.path.insert(0, str(Path(__file__).parent / "cluster"))
    from clusterproc import Cluster

    settings = {**BROKER_OVERRIDES, **SCENARIOS[scenario], "transaction.state.log.replication.factor": str(size),
                "transaction.state.log.min.isr": "2", **(overrides or {})}
    cluster = Cluster(workdir / "cluster", size=size, overrides=settings)
    try:
        cluster.start()
        result = run_test(test, cluster.bootstrap, workdir / "runner", scenario=scenario, **kw)  # type: ignore[arg-type]
    finally:
        logs = cluster.logs()
        cluster.stop()
    return result, logs


def main() -> int:
    p = argparse.ArgumentParser(description="Run librdkafka's own tests against a new strom broker each.")
    p.add_argument("tests", nargs="+", help="test names (0081_admin) or numbers (0081); a name runs in its scenario")
    p.add_argument("--subtests", help="only the sub-tests whose name contains this (SUBTESTS)")
    p.add_argument("--full", action="store_true", help="not quick mode (-Q off): all sub-tests, more data")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per test (default 300)")
    p.add_argument("--verbose", "-v", action="store_true", help="print the runner's whole output")
    p.add_argument("--brokers", type=int, default=1, help="a cluster of this many brokers (with ZooKeeper)")
    p.add_argument("--group-protocol", choices=("classic", "consumer"),
                   help="the consumers' group.protocol (TEST_CONSUMER_GROUP_PROTOCOL; default: librdkafka's, classic)")
    ns = p.parse_args()
    failed = 0
    known = known_tests()
    for test in ns.tests:
        scenario = known[test][1] if test in known else "default"
        with tempfile.TemporaryDirectory(prefix=f"rdkafka-{test}-") as tmp:
            if ns.brokers > 1:
                result, logs = run_against_new_cluster(test, Path(tmp), size=ns.brokers, scenario=scenario,
                                                       subtests=ns.subtests, quick=not ns.full, timeout=ns.timeout,
                                                       group_protocol=ns.group_protocol)
            else:
                result, broker = run_against_new_broker(test, Path(tmp), scenario=scenario, subtests=ns.subtests,
                                                        quick=not ns.full, timeout=ns.timeout,
                                                        group_protocol=ns.group_protocol)
                logs = "\n".join(broker.log_lines[-30:])
        if ns.verbose or not result.passed:
            print(result.output if ns.verbose else result.tail())
            if not result.passed:
                print("--- broker logs ---\n" + logs)
        print(result.summary(), flush=True)
        failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
