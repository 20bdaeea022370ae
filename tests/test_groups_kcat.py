"""Debian's kcat (librdkafka 2.0) as a balanced consumer group member (-G), with committed offsets."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_produce
from test_groups_common import create_topics, group_broker_fixture, values

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


def kcat_group(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int, str]]:
    out = subprocess.run(
        [KCAT, "-b", bootstrap, "-G", group, topic, "-q", "-c", str(count), "-f", "%p %o %s\\n",
         "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rows = [line.split(" ", 2) for line in out.splitlines() if line]
    return [(int(p), int(o), v) for p, o, v in rows]


@pytest.mark.timeout(120)
def test_kcat_consumes_as_group_member_and_resumes_from_commit(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"kc-topic": 2})
    first = confluent_produce(bs, "kc-topic", values(50))
    got = kcat_group(bs, "kc-group", "kc-topic", 50)
    assert sorted((p, o) for p, o, _ in got) == sorted((d.partition, d.offset) for d in first)
    assert {v for _, _, v in got} == {f"v{i}" for i in range(50)}

    # kcat committed on exit: a second run of the group reads only what came after.
    second = confluent_produce(bs, "kc-topic", values(10, 50))
    got = kcat_group(bs, "kc-group", "kc-topic", 10)
    assert sorted((p, o) for p, o, _ in got) == sorted((d.partition, d.offset) for d in second)
