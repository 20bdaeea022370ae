"""``strom configs describe|alter`` as a subprocess against a live broker, checked through confluent-kafka's
AdminClient; errors are one line with a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_admin, create_topics

pytestmark = pytest.mark.timeout(90)

STROM = [sys.executable, "-m", "strom.cli.main"]


def strom(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STROM_DEBUG", "STROM_BOOTSTRAP_SERVER")}
    return subprocess.run([*STROM, *args], capture_output=True, text=True, timeout=60, env=env)


def ok(*args: str) -> str:
    proc = strom(*args)
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def one_line_failure(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def bs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = BrokerProcess(tmp_path_factory.mktemp("cfgcli") / "data").start()
    yield b.bootstrap
    b.stop()


def topic_config(bs: str, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)
    (f,) = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=15).values()
    return dict(f.result(timeout=20))


def test_topic_configs(bs: str) -> None:
    create_topics(bs, {"cfg": 1}, {"retention.ms": "3600000"})
    out = ok("configs", "describe", "--topic", "cfg", "-b", bs)
    assert "retention.ms" in out and "3600000" in out and "DYNAMIC_TOPIC_CONFIG" in out
    assert "segment.bytes" not in out  # defaults only with --all
    assert "segment.bytes" in ok("configs", "describe", "--topic", "cfg", "--all", "-b", bs)

    out = ok("configs", "alter", "--topic", "cfg", "--set", "segment.bytes=1048576", "--append",
             "cleanup.policy=compact", "--delete", "retention.ms", "-b", bs)
    assert "Updated configs of topic 'cfg'" in out and "cleanup.policy+=compact" in out
    c = topic_config(bs, "cfg")
    assert c["segment.bytes"].value == "1048576" and c["cleanup.policy"].value == "delete,compact"
    assert c["retention.ms"].value == "604800000"
    ok("configs", "alter", "--topic", "cfg", "--subtract", "cleanup.policy=delete", "-b", bs)
    described = json.loads(ok("configs", "describe", "--topic", "cfg", "--json", "-b", bs))
    assert described["cleanup.policy"] == {"value": "compact", "source": "DYNAMIC_TOPIC_CONFIG", "read_only": False,
                                           "sensitive": False}
    assert "Valid (nothing changed)" in ok("configs", "alter", "--topic", "cfg", "--set", "retention.ms=1",
                                           "--validate-only", "-b", bs)
    assert topic_config(bs, "cfg")["retention.ms"].value == "604800000"


def test_broker_configs(bs: str) -> None:
    ok("configs", "alter", "--broker", "0", "--set", "log.retention.bytes=5000000", "-b", bs)
    described = json.loads(ok("configs", "describe", "--broker", "0", "--json", "-b", bs))
    assert described["log.retention.bytes"]["source"] == "DYNAMIC_BROKER_CONFIG"
    assert described["log.retention.bytes"]["value"] == "5000000"
    assert described["listeners"]["read_only"] is True  # set on the command line: static
    table = ok("configs", "describe", "--broker", "0", "-b", bs)
    assert "Read-only" in table and "DYNAMIC_BROKER_CONFIG" in table
    ok("configs", "alter", "--broker", "0", "--delete", "log.retention.bytes", "-b", bs)
    assert "log.retention.bytes" not in json.loads(ok("configs", "describe", "--broker", "0", "--json", "-b", bs))


def test_errors_are_one_line(bs: str) -> None:
    line = one_line_failure(strom("configs", "alter", "--topic", "cfg-none", "--set", "retention.ms=1", "-b", bs), 1)
    assert "topic 'cfg-none' does not exist" in line
    create_topics(bs, {"cfg-err": 1})
    line = one_line_failure(strom("configs", "alter", "--topic", "cfg-err", "--set", "retention.ms=x", "-b", bs), 1)
    assert "retention.ms" in line and "INVALID_CONFIG" in line
    line = one_line_failure(strom("configs", "alter", "--broker", "0", "--set", "num.partitions=4", "-b", bs), 1)
    assert "num.partitions" in line and "dynamically" in line
    line = one_line_failure(strom("configs", "describe", "-b", bs), 2)
    assert "--topic" in line
    line = one_line_failure(strom("configs", "alter", "--topic", "cfg-err", "-b", bs), 2)
    assert "nothing to change" in line
    line = one_line_failure(strom("configs", "describe", "--topic", "x", "-b", "127.0.0.1:1", "--connect-timeout", "1"),
                            1)
    assert "cannot reach broker" in line


def test_registered_in_main_help() -> None:
    assert "configs" in ok("--help")

