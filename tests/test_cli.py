"""The `strom` client commands (topics, produce, consume) as real subprocesses against a live broker, checked
by their output and by their effect through other clients: confluent-kafka's AdminClient and Debian's kcat.
Error cases (unreachable broker, silent broker, missing topic, bad options) must give one line on stderr, a
non-zero exit and no traceback, within a bounded time."""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import die_with_parent_hook, free_port
from helpers import (
    RawConnection,
    confluent_admin,
    confluent_produce,
    create_topics,
    librdkafka_consistent_partition,
    wait_until,
)

KCAT = "/usr/bin/kcat"
STROM = [sys.executable, "-m", "strom.cli.main"]
ENTRY_POINT = Path(sys.executable).parent / "strom"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STROM_DEBUG", "STROM_BOOTSTRAP_SERVER")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def strom(*args: str, stdin: str | bytes | None = None, timeout: float = 60.0,
          cmd: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    return subprocess.run([*(cmd or STROM), *args], input=data, capture_output=True, text=True, timeout=timeout,
                          env=_env())


def ok(*args: str, **kw: Any) -> str:
    proc = strom(*args, **kw)
    assert proc.returncode == 0, f"strom {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def one_line_failure(proc: subprocess.CompletedProcess[str], code: int | None = None) -> str:
    """Assert the process failed with exactly one line on stderr and no traceback; return that line."""
    assert proc.returncode != 0, f"expected failure, got 0:\n{proc.stdout}\n{proc.stderr}"
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    return lines[0]


def kcat(*args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def kcat_consume(bs: str, topic: str, *extra: str) -> list[dict[str, Any]]:
    out = kcat("-C", "-b", bs, "-t", topic, "-o", "beginning", "-e", "-q", "-J", *extra)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def topic_configs(bs: str, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    admin = confluent_admin(bs)  # keep the client alive until the future resolves
    futures = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=15)
    return dict(next(iter(futures.values())).result(timeout=20))


def broker_supports(bs: str, api_key: int) -> bool:
    with RawConnection(bs) as conn:
        return any(int(k.api_key) == api_key for k in conn.api_versions().api_keys)


@pytest.fixture(scope="module")
def bs(module_broker: Any) -> str:
    return str(module_broker.bootstrap)


# --------------------------------------------------------------------------------------------------
# topics


def test_topics_create_list_describe_delete(bs: str) -> None:
    from confluent_kafka.admin import ConfigSource

    out = ok("topics", "create", "cli-t1", "--partitions", "3", "--replication-factor", "1",
             "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete", "-b", bs)
    assert "Created topic 'cli-t1'" in out
    # Effect, seen by another client.
    md = confluent_admin(bs).list_topics("cli-t1", timeout=10)
    assert md.topics["cli-t1"].error is None
    assert sorted(md.topics["cli-t1"].partitions) == [0, 1, 2]
    cfg = topic_configs(bs, "cli-t1")
    assert cfg["retention.ms"].value == "3600000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # Creating it again fails in one line; --if-not-exists makes that a success.
    line = one_line_failure(strom("topics", "create", "cli-t1", "-p", "1", "-b", bs), code=1)
    assert "cli-t1" in line and "already exists" in line
    ok("topics", "create", "cli-t1", "-p", "1", "--if-not-exists", "-b", bs)

    # Without --partitions the broker's default applies.
    ok("topics", "create", "cli-t-default", "-b", bs)
    md = confluent_admin(bs).list_topics("cli-t-default", timeout=10)
    assert len(md.topics["cli-t-default"].partitions) >= 1

    # list: table, names only, JSON.
    table = ok("topics", "list", "-b", bs)
    row = next(line for line in table.splitlines() if " cli-t1 " in line)
    assert "3" in row.split("cli-t1", 1)[1]
    names = ok("topics", "list", "-q", "-b", bs).split()
    assert "cli-t1" in names and "cli-t-default" in names
    listed = {t["name"]: t for t in json.loads(ok("topics", "list", "--json", "-b", bs))}
    assert listed["cli-t1"] == {"name": "cli-t1", "partitions": 3, "replication_factor": 1}

    # describe: partitions, leader, replicas, ISR, watermarks after writing known counts per partition.
    confluent_produce(bs, "cli-t1", [{"value": b"x" * 100, "partition": p} for p in (0, 0, 0, 0, 2)])
    (d,) = json.loads(ok("topics", "describe", "cli-t1", "--json", "-b", bs))
    assert d["name"] == "cli-t1" and d["replication_factor"] == 1
    assert d["configs"]["retention.ms"] == "3600000"
    broker_id = next(iter(confluent_admin(bs).list_topics(timeout=10).brokers))
    parts = {p["partition"]: p for p in d["partitions"]}
    assert sorted(parts) == [0, 1, 2]
    for p in parts.values():
        assert p["leader"] == broker_id and p["replicas"] == [broker_id] and p["isr"] == [broker_id]
        assert p["start_offset"] == 0
    assert [parts[i]["end_offset"] for i in range(3)] == [4, 0, 1]
    if broker_supports(bs, 35):  # DescribeLogDirs: sizes shown
        assert parts[0]["size_bytes"] > 400 and parts[1]["size_bytes"] == 0 and parts[2]["size_bytes"] > 100
    else:  # no sizes, and no error either
        assert all("size_bytes" not in p for p in parts.values())
    text = ok("topics", "describe", "cli-t1", "-b", bs)
    assert "Topic: cli-t1" in text and "Partitions: 3" in text and "retention.ms=3600000" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("│", "|"))]
    cells = [[c for c in r if c not in ("│", "|")] for r in rows]
    assert [c[:6] for c in cells] == [[str(i), str(broker_id), str(broker_id), str(broker_id), "0", str(e)]
                                      for i, e in enumerate((4, 0, 1))]
    # All configs with their sources.
    (d_all,) = json.loads(ok("topics", "describe", "cli-t1", "--all-configs", "--json", "-b", bs))
    assert d_all["config_sources"]["retention.ms"] == "DYNAMIC_TOPIC_CONFIG"
    assert len(d_all["configs"]) > len(d["configs"])

    # delete, checked by another client.
    out = ok("topics", "delete", "cli-t1", "cli-t-default", "-b", bs)
    assert "Deleted topic 'cli-t1'" in out and "Deleted topic 'cli-t-default'" in out

    def gone() -> bool:
        md = confluent_admin(bs).list_topics(timeout=10)
        return "cli-t1" not in md.topics and "cli-t-default" not in md.topics

    wait_until(gone, 15, what="deleted topics gone from metadata")
    line = one_line_failure(strom("topics", "delete", "cli-t1", "-b", bs), code=1)
    assert "cli-t1" in line and "does not exist" in line
    ok("topics", "delete", "cli-t1", "--if-exists", "-b", bs)


def test_topics_alter(bs: str) -> None:
    from confluent_kafka.admin import ConfigSource

    create_topics(bs, {"cli-alter": 2})
    out = ok("topics", "alter", "cli-alter", "--partitions", "5", "-b", bs)
    assert "now has 5 partitions (was 2)" in out
    wait_until(lambda: len(confluent_admin(bs).list_topics("cli-alter", timeout=10).topics["cli-alter"].partitions) == 5,
               15, what="5 partitions in metadata")
    # Shrinking is refused in one line.
    line = one_line_failure(strom("topics", "alter", "cli-alter", "-p", "3", "-b", bs), code=1)
    assert "5 partitions" in line

    proc = strom("topics", "alter", "cli-alter", "--config", "retention.ms=7200000", "-b", bs)
    if broker_supports(bs, 44):  # IncrementalAlterConfigs
        assert proc.returncode == 0, proc.stderr
        assert "retention.ms=7200000" in proc.stdout
        assert topic_configs(bs, "cli-alter")["retention.ms"].value == "7200000"
        ok("topics", "alter", "cli-alter", "--delete-config", "retention.ms", "-b", bs)
        assert topic_configs(bs, "cli-alter")["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    else:  # a broker without the API: said so in one line
        line = one_line_failure(proc, code=1)
        assert "does not support" in line and "IncrementalAlterConfigs" in line


# --------------------------------------------------------------------------------------------------
# produce with the CLI, read with kcat


def test_produce_then_kcat_reads(bs: str) -> None:
    create_topics(bs, {"cli-produce": 3})
    keyed = [(f"key-{i % 6}", f"value-{i}") for i in range(30)]
    out = strom("produce", "cli-produce", "--key-separator", ":", "--header", "app=cli", "--header", "run=1",
                "--acks", "all", "--compression", "zstd", "-b", bs,
                stdin="".join(f"{k}:{v}\n" for k, v in keyed))
    assert out.returncode == 0, out.stderr
    assert "Produced 30 record(s)" in out.stderr
    # Pinned to a partition, other codecs and acks, a value containing the separator's absence is fine here.
    for codec, acks in (("gzip", "1"), ("snappy", "0"), ("lz4", "-1"), ("none", "all")):
        ok("produce", "cli-produce", "--partition", "2", "--compression", codec, "--acks", acks, "-q", "-b", bs,
           stdin=f"pinned-{codec}-a\npinned-{codec}-b\n")

    msgs = kcat_consume(bs, "cli-produce")
    by_value = {m["payload"]: m for m in msgs}
    assert len(msgs) == 30 + 8
    for k, v in keyed:
        m = by_value[v]
        assert m["key"] == k
        assert m["headers"] == ["app", "cli", "run", "1"]
        assert m["partition"] == librdkafka_consistent_partition(k.encode(), 3)
    for codec in ("gzip", "snappy", "lz4", "none"):
        for suffix in "ab":
            m = by_value[f"pinned-{codec}-{suffix}"]
            assert m["partition"] == 2 and m["key"] is None
    # Produce order kept within a partition.
    for p in range(3):
        values = [m["payload"] for m in sorted(msgs, key=lambda m: m["offset"]) if m["partition"] == p]
        expected = [v for k, v in keyed if librdkafka_consistent_partition(k.encode(), 3) == p]
        assert [v for v in values if v.startswith("value-")] == expected


def test_produce_reports_failed_records(bs: str) -> None:
    create_topics(bs, {"cli-produce-bad": 1})
    big = "x" * (2 * 1024 * 1024)  # over librdkafka's message.max.bytes
    lines = ["a:1", "no separator here", "b:2", f"c:{big}", "d:4", ""]
    proc = strom("produce", "cli-produce-bad", "-K", ":", "-b", bs, stdin="\n".join(lines) + "\n")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errs = proc.stderr.splitlines()
    assert any(e.startswith("record at line 2 failed") and "separator" in e for e in errs), errs
    assert any(e.startswith("record at line 4 failed") and "too large" in e.lower() for e in errs), errs
    assert any(e.startswith("record at line 6 failed") for e in errs), errs  # empty line: no separator
    assert "Produced 3 record(s) to 'cli-produce-bad', 3 failed." in errs
    # The good records went through, in order.
    assert [(m["key"], m["payload"]) for m in kcat_consume(bs, "cli-produce-bad")] == [("a", "1"), ("b", "2"), ("d", "4")]


def test_produce_via_entry_point_and_env_bootstrap(bs: str) -> None:
    """The installed `strom` script, with the broker given by STROM_BOOTSTRAP_SERVER."""
    create_topics(bs, {"cli-entry": 1})
    env = {**_env(), "STROM_BOOTSTRAP_SERVER": bs}
    proc = subprocess.run([str(ENTRY_POINT), "produce", "cli-entry", "-q"], input="one\ntwo\n", capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert [m["payload"] for m in kcat_consume(bs, "cli-entry")] == ["one", "two"]


# --------------------------------------------------------------------------------------------------
# produce with kcat, read with the CLI


FULL_FORMAT = "{topic}|{partition}|{offset}|{key}|{value}|{headers}|{timestamp}|{time}"


def _parse_full(out: str) -> list[dict[str, Any]]:
    rows = []
    for line in out.splitlines():
        topic, part, off, key, value, headers, ts, iso = line.split("|")
        rows.append({"topic": topic, "partition": int(part), "offset": int(off), "key": key, "value": value,
                     "headers": headers, "timestamp": int(ts), "time": iso})
    return rows


def test_kcat_produces_cli_consumes(bs: str) -> None:
    create_topics(bs, {"cli-consume": 3})
    for p in range(3):
        kcat("-P", "-b", bs, "-t", "cli-consume", "-p", str(p), "-K", "=", "-H", f"src=kcat{p}", "-H", "h2=x",
             stdin="".join(f"k{p}-{i}=v{p}-{i}\n" for i in range(4 + p)))
    truth = kcat_consume(bs, "cli-consume")
    assert len(truth) == 4 + 5 + 6

    out = ok("consume", "cli-consume", "--from-beginning", "--exit-at-end", "--format", FULL_FORMAT, "-b", bs,
             timeout=60)
    rows = _parse_full(out)
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted((m["partition"], m["offset"]) for m in truth)
    by_pos = {(m["partition"], m["offset"]): m for m in truth}
    for r in rows:
        m = by_pos[(r["partition"], r["offset"])]
        assert r["topic"] == "cli-consume"
        assert (r["key"], r["value"]) == (m["key"], m["payload"])
        assert r["headers"] == f"src=kcat{r['partition']},h2=x"
        assert r["timestamp"] == m["ts"]
        assert r["time"] == datetime.datetime.fromtimestamp(m["ts"] / 1000, datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%S.") + f"{m['ts'] % 1000:03d}Z"
    # Within a partition, in offset order.
    for p in range(3):
        offs = [r["offset"] for r in rows if r["partition"] == p]
        assert offs == list(range(4 + p))

    # Default format is the value; escapes in --format.
    values = ok("consume", "cli-consume", "--from-beginning", "-e", "-p", "1", "-b", bs).splitlines()
    assert values == [f"v1-{i}" for i in range(5)]
    tabbed = ok("consume", "cli-consume", "--from-beginning", "-e", "-p", "0", "-f", r"{offset}\t{key}", "-b", bs)
    assert tabbed.splitlines() == [f"{i}\tk0-{i}" for i in range(4)]

    # --offset N in one partition; negative: the last N of each partition.
    assert ok("consume", "cli-consume", "-p", "2", "--offset", "4", "-e", "-b", bs).splitlines() == ["v2-4", "v2-5"]
    tail = ok("consume", "cli-consume", "--offset", "-1", "-e", "-f", "{partition}:{value}", "-b", bs)
    assert sorted(tail.splitlines()) == ["0:v0-3", "1:v1-4", "2:v2-5"]

    # --max-messages: exactly N, then exit.
    proc = strom("consume", "cli-consume", "--from-beginning", "--max-messages", "7", "-b", bs, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 7
    assert "Consumed 7 record(s)" in proc.stderr


def test_consume_from_timestamp(bs: str) -> None:
    create_topics(bs, {"cli-time": 1})
    kcat("-P", "-b", bs, "-t", "cli-time", stdin="early-1\nearly-2\n")
    time.sleep(0.05)
    kcat("-P", "-b", bs, "-t", "cli-time", stdin="late-1\nlate-2\n")
    msgs = kcat_consume(bs, "cli-time")
    first_late = next(m for m in msgs if m["payload"] == "late-1")
    assert max(m["ts"] for m in msgs if m["payload"].startswith("early")) < first_late["ts"]
    iso = datetime.datetime.fromtimestamp(first_late["ts"] / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    assert ok("consume", "cli-time", "--timestamp", iso, "-e", "-b", bs).splitlines() == ["late-1", "late-2"]
    # Epoch milliseconds work too; a time after every record starts at the end.
    assert ok("consume", "cli-time", "--timestamp", str(first_late["ts"]), "-e", "-b", bs).splitlines() == [
        "late-1", "late-2"]
    assert ok("consume", "cli-time", "--timestamp", "2999-01-01T00:00:00Z", "-e", "-b", bs) == ""


def test_consume_idle_timeout_on_empty_topic(bs: str) -> None:
    create_topics(bs, {"cli-empty": 2})
    start = time.monotonic()
    proc = strom("consume", "cli-empty", "--from-beginning", "--timeout", "1.5", "-b", bs, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert 1.5 <= elapsed < 20


class _Reader:
    """Collects a subprocess's stdout lines in a thread, so a test can wait for them."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self.thread = threading.Thread(target=lambda: self.lines.extend(line.rstrip("\n") for line in stream),
                                       daemon=True)
        self.thread.start()


@pytest.fixture
def consumer_proc() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_consume_follows_new_records_and_exits_cleanly_on_ctrl_c(bs: str, consumer_proc: list[Any]) -> None:
    create_topics(bs, {"cli-follow": 1})
    kcat("-P", "-b", bs, "-t", "cli-follow", stdin="old-1\nold-2\n")
    proc = subprocess.Popen([*STROM, "consume", "cli-follow", "-b", bs], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), preexec_fn=die_with_parent_hook())
    consumer_proc.append(proc)
    reader = _Reader(proc)
    # It starts at the end: keep writing probes until one shows up; the old records never do.
    i = 0

    def probe_seen() -> bool:
        nonlocal i
        i += 1
        kcat("-P", "-b", bs, "-t", "cli-follow", stdin=f"probe-{i}\n")
        return any(line.startswith("probe-") for line in reader.lines)

    wait_until(probe_seen, 30, interval=0.3, what="the consumer to print a new record")
    kcat("-P", "-b", bs, "-t", "cli-follow", stdin="last\n")
    wait_until(lambda: "last" in reader.lines, 15, what="the last record")
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(15)
    reader.thread.join(5)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    assert "Consumed" in stderr
    assert not any(line.startswith("old-") for line in reader.lines)
    assert reader.lines[-1] == "last"
    assert [line for line in reader.lines if line.startswith("probe-")] == [
        f"probe-{n}" for n in range(int(reader.lines[0].split("-")[1]), i + 1)]


def test_consume_with_group_commits_and_resumes(bs: str) -> None:
    create_topics(bs, {"cli-group": 2})
    confluent_produce(bs, "cli-group", [{"value": f"g-{i}".encode(), "partition": i % 2} for i in range(10)])
    first = ok("consume", "cli-group", "--group", "cli-g1", "--from-beginning", "--max-messages", "4",
               "-f", "{partition}:{offset}:{value}", "-b", bs, timeout=90).splitlines()
    assert len(first) == 4
    # The group's committed offsets cover exactly what was printed.
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = confluent_admin(bs)
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("cli-g1", [TopicPartition("cli-group", 0), TopicPartition("cli-group", 1)])],
        request_timeout=15)
    committed = {tp.partition: tp.offset for tp in next(iter(futures.values())).result(timeout=20).topic_partitions}
    printed: dict[int, int] = {}
    for line in first:
        p, o, _ = line.split(":")
        printed[int(p)] = max(printed.get(int(p), -1), int(o))
    assert {p: committed[p] for p in printed} == {p: o + 1 for p, o in printed.items()}
    # A second run of the same group picks up where the first stopped: the rest, nothing twice.
    second = ok("consume", "cli-group", "--group", "cli-g1", "--from-beginning", "--timeout", "3",
                "-f", "{partition}:{offset}:{value}", "-b", bs, timeout=90).splitlines()
    assert sorted(first + second) == sorted(f"{i % 2}:{i // 2}:g-{i}" for i in range(10))


# --------------------------------------------------------------------------------------------------
# errors: one line, non-zero exit, no traceback, bounded time


CLIENT_COMMANDS: list[tuple[list[str], str | None]] = [
    (["topics", "list"], None),
    (["topics", "create", "x", "-p", "1"], None),
    (["topics", "describe", "x"], None),
    (["topics", "delete", "x"], None),
    (["topics", "alter", "x", "-p", "2"], None),
    (["produce", "x"], "a\n"),
    (["consume", "x", "--timeout", "1"], None),
]


@pytest.mark.parametrize(("args", "stdin"), CLIENT_COMMANDS, ids=[" ".join(a[:2]) for a, _ in CLIENT_COMMANDS])
def test_unreachable_broker(args: list[str], stdin: str | None) -> None:
    port = free_port()  # nothing listens there
    start = time.monotonic()
    proc = strom(*args, "-b", f"127.0.0.1:{port}", stdin=stdin, timeout=30)
    assert time.monotonic() - start < 15
    line = one_line_failure(proc, code=1)
    assert line == f"Error: cannot reach broker at 127.0.0.1:{port} (connection refused)"


def test_silent_broker_times_out_in_one_line() -> None:
    """Something accepts connections but never answers: the wait is bounded by --connect-timeout."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        port = srv.getsockname()[1]
        for args, stdin in (CLIENT_COMMANDS[0], CLIENT_COMMANDS[5], CLIENT_COMMANDS[6]):
            start = time.monotonic()
            proc = strom(*args, "-b", f"127.0.0.1:{port}", "--connect-timeout", "2", stdin=stdin, timeout=30)
            elapsed = time.monotonic() - start
            line = one_line_failure(proc, code=1)
            assert line.startswith(f"Error: cannot reach broker at 127.0.0.1:{port}"), line
            assert elapsed < 12, elapsed


@pytest.mark.parametrize(("args", "stdin"), [
    (["topics", "describe", "cli-missing"], None),
    (["topics", "delete", "cli-missing"], None),
    (["topics", "alter", "cli-missing", "-p", "4"], None),
    (["consume", "cli-missing", "--timeout", "1"], None),
], ids=["describe", "delete", "alter", "consume"])
def test_missing_topic(bs: str, args: list[str], stdin: str | None) -> None:
    line = one_line_failure(strom(*args, "-b", bs, stdin=stdin, timeout=60), code=1)
    assert line == "Error: topic 'cli-missing' does not exist"
    assert "cli-missing" not in confluent_admin(bs).list_topics(timeout=10).topics  # and nothing created it


def test_produce_to_missing_topic_without_auto_create(broker_factory: Any) -> None:
    b = broker_factory(overrides={"auto.create.topics.enable": "false"})
    line = one_line_failure(strom("produce", "nowhere", "-b", b.bootstrap, stdin="a\n", timeout=60), code=1)
    assert line == "Error: topic 'nowhere' does not exist"


def test_produce_to_missing_topic_with_auto_create(bs: str) -> None:
    """A broker that creates topics on use does so for `strom produce`, as for any producer."""
    ok("produce", "cli-auto", "-q", "-b", bs, stdin="created\n")
    assert [m["payload"] for m in kcat_consume(bs, "cli-auto")] == ["created"]


def test_missing_partition(bs: str) -> None:
    create_topics(bs, {"cli-parts": 2})
    line = one_line_failure(strom("consume", "cli-parts", "-p", "5", "-b", bs), code=1)
    assert line == "Error: topic 'cli-parts' has 2 partitions; there is no partition 5"
    line = one_line_failure(strom("produce", "cli-parts", "-p", "2", "-b", bs, stdin="a\n"), code=1)
    assert line == "Error: topic 'cli-parts' has 2 partitions; there is no partition 2"


@pytest.mark.parametrize("args", [
    ["topics", "create", "x", "--bogus"],
    ["topics", "create", "x", "--partitions", "zero"],
    ["topics", "create", "x", "--partitions", "0"],
    ["topics", "create", "x", "--config", "no-equals-sign"],
    ["topics", "frobnicate"],
    ["topics", "alter", "x"],
    ["produce", "x", "--acks", "2"],
    ["produce", "x", "--compression", "brotli"],
    ["produce", "x", "--header", "novalue"],
    ["consume", "x", "--format", "{nope}"],
    ["consume", "x", "--format", "{value"],
    ["consume", "x", "--from-beginning", "--offset", "3"],
    ["consume", "x", "--timestamp", "yesterday"],
    ["consume", "x", "--max-messages", "0"],
    ["consume"],
    ["consume", "x", "-X", "not-a-pair"],
], ids=lambda a: " ".join(a))
def test_bad_option(args: list[str]) -> None:
    # Against a closed port: options are checked before any connection is made.
    proc = strom(*args, "-b", f"127.0.0.1:{free_port()}", stdin="", timeout=30)
    line = one_line_failure(proc, code=2)
    assert line.startswith("Error: "), line
    assert "--help" in line


def test_bad_client_property_is_one_line(bs: str) -> None:
    line = one_line_failure(strom("topics", "list", "-X", "no.such.property=1", "-b", bs), code=1)
    assert "no.such.property" in line


@pytest.mark.timeout(90)
def test_cluster_command_on_a_single_broker(bs: str) -> None:
    """One broker is a cluster of one: it is listed as the controller, nothing needs attention."""
    create_topics(bs, {"cli-solo": 2})
    port = int(bs.rsplit(":", 1)[1])
    c = json.loads(ok("cluster", "--json", "-b", bs))
    assert c["brokers"] == [{"id": 0, "host": "127.0.0.1", "port": port, "rack": None, "controller": True}]
    assert c["controller_id"] == 0 and c["cluster_id"] and c["partitions"] >= 2
    assert c["under_replicated_partitions"] == [] and c["offline_partitions"] == []
    text = ok("cluster", "-b", bs)
    assert "Controller: 0" in text and "Brokers: 1" in text
    assert f"127.0.0.1:{port}" in text
    assert "Under-replicated partitions: none" in text and "Offline partitions: none" in text
    # kafka-topics' filters: nothing is under-replicated or unavailable, so nothing is shown.
    assert ok("topics", "describe", "--under-replicated-partitions", "-b", bs).strip() == ""
    assert json.loads(ok("topics", "describe", "cli-solo", "--unavailable-partitions", "--json", "-b", bs)) == []
    line = one_line_failure(strom("cluster", "-b", f"127.0.0.1:{free_port()}", "--connect-timeout", "1"), code=1)
    assert "cannot reach broker" in line


def test_help_lists_commands() -> None:
    out = ok("--help")
    for name in ("topics", "produce", "consume", "cluster"):
        assert name in out
    sub = ok("topics", "--help")
    for name in ("create", "list", "describe", "delete", "alter"):
        assert name in sub
    assert "{value}" in ok("consume", "--help")


# --------------------------------------------------------------------------------------------------
# partition sizes through DescribeLogDirs (neither strom nor the peer broker serves it yet, so a stand-in)


class _LogDirsBroker:
    """Answers ApiVersions (advertising DescribeLogDirs up to ``max_version``) and DescribeLogDirs with
    fixed sizes on a thread; enough to check the client side of `topics describe`'s size column."""

    def __init__(self, sizes: dict[int, int], max_version: int = 4) -> None:
        self.sizes = sizes
        self.max_version = max_version
        self.requests: list[tuple[int, int, Any]] = []
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        from strom.protocol import build, wire

        conn, _ = self.srv.accept()
        with conn:
            decoder = wire.FrameDecoder(1 << 20)
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in decoder.feed(data):
                    prefix = wire.read_prefix(frame)
                    _, body = wire.decode_request(prefix, frame)
                    self.requests.append((prefix.api_key, prefix.api_version, body))
                    cls = wire.response_class(prefix.api_key, prefix.api_version)
                    if prefix.api_key == 18:
                        response = build.build(cls, {"error_code": 0, "api_keys": [
                            {"api_key": 3, "min_version": 0, "max_version": 12},
                            {"api_key": 35, "min_version": 1, "max_version": self.max_version}]})
                    else:
                        (topic,) = body.topics
                        parts = [{"partition_index": p, "partition_size": self.sizes[p], "offset_lag": 0,
                                  "is_future_key": False} for p in topic.partitions]
                        response = build.build(cls, {"error_code": 0, "results": [
                            {"error_code": 0, "log_dir": "/data", "topics": [{"name": topic.topic, "partitions": parts}]}]})
                    conn.sendall(wire.encode_response(prefix.api_key, prefix.api_version, prefix.correlation_id,
                                                      response))

    def close(self) -> None:
        self.srv.close()
        self.thread.join(5)


@pytest.mark.parametrize("max_version", [1, 4])
def test_describe_log_dirs_sizes(max_version: int) -> None:
    from strom.cli.topics import _broker_log_dir_sizes

    fake = _LogDirsBroker({0: 1234, 1: 0, 2: 98765}, max_version=max_version)
    try:
        sizes = _broker_log_dir_sizes("127.0.0.1", fake.port, "sized", [0, 2], timeout=5)
    finally:
        fake.close()
    assert sizes == {0: 1234, 2: 98765}
    assert [(k, v) for k, v, _ in fake.requests] == [(18, 0), (35, max_version)]
    assert fake.requests[1][2].topics[0].partitions == (0, 2)


def test_describe_log_dirs_unsupported_gives_no_sizes() -> None:
    """A broker that closes the connection (or lacks the API) yields None: the size column is left out."""
    from strom.cli.topics import _broker_log_dir_sizes

    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]

        def close_at_once() -> None:
            conn, _ = srv.accept()
            conn.close()

        t = threading.Thread(target=close_at_once, daemon=True)
        t.start()
        assert _broker_log_dir_sizes("127.0.0.1", port, "x", [0], timeout=5) is None
        t.join(5)
    assert _broker_log_dir_sizes("127.0.0.1", free_port(), "x", [0], timeout=5) is None
