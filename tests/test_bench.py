"""``strom bench``: short produce, consume and e2e runs against a live broker; the JSON output must count
every record sent and received. Correctness of the tool, not speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, free_port

from strom.bench.result import BenchResult
from strom.bench.stats import percentile, summarize

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(180)


def bench(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "bench", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def bench_json(*args: str) -> dict[str, Any]:
    proc = bench(*args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_produce_then_consume_counts_every_record(module_broker: BrokerProcess) -> None:
    b = module_broker.bootstrap
    produced = bench_json("produce", "-b", b, "--topic", "bench-pc", "--records", "3000", "--record-size", "200",
                          "--partitions", "3", "--acks", "all", "--linger-ms", "2")
    assert produced["mode"] == "produce"
    assert produced["settings"]["partitions"] == 3
    assert produced["records"] == {"requested": 3000, "sent": 3000, "acknowledged": 3000, "failed": 0,
                                   "unresolved": 0, "received": 0}
    assert produced["bytes"] == 3000 * 200
    assert produced["ok"] is True and produced["errors"] == {} and produced["stopped"] is None
    lat = produced["latency_ms"]
    assert lat["count"] == 3000
    assert 0 <= lat["min"] <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]
    assert produced["records_per_s"] > 0 and produced["mb_per_s"] > 0

    consumed = bench_json("consume", "-b", b, "--topic", "bench-pc", "--records", "3000", "--timeout", "20")
    assert consumed["records"]["received"] == 3000
    assert consumed["bytes"] == 3000 * 200
    assert consumed["ok"] is True and consumed["stopped"] is None
    assert consumed["available_at_start"] == 3000

    # --records 0: everything the topic holds
    everything = bench_json("consume", "-b", b, "--topic", "bench-pc", "--records", "0", "--timeout", "20")
    assert everything["records"]["requested"] == 3000
    assert everything["records"]["received"] == 3000


def test_e2e_counts_every_record_sent_and_received(module_broker: BrokerProcess) -> None:
    out = bench_json("e2e", "-b", module_broker.bootstrap, "--topic", "bench-e2e", "--records", "2000",
                     "--record-size", "100", "--partitions", "2", "--acks", "1", "--target-rate", "2000",
                     "--timeout", "20")
    assert out["mode"] == "e2e"
    assert out["records"] == {"requested": 2000, "sent": 2000, "acknowledged": 2000, "failed": 0, "unresolved": 0,
                              "received": 2000, "unique": 2000, "duplicates": 0, "lost": 0}
    assert out["bytes"] == 2000 * 100
    assert out["ok"] is True
    assert out["latency_ms"]["count"] == 2000
    assert out["delivery_latency_ms"]["p50"] > 0
    # paced at 2000 records/s: about a second, certainly not much faster
    assert out["elapsed_s"] > 0.8


def test_e2e_ignores_records_already_in_the_topic(module_broker: BrokerProcess) -> None:
    b = module_broker.bootstrap
    bench_json("produce", "-b", b, "--topic", "bench-e2e-old", "--records", "500", "--record-size", "64")
    out = bench_json("e2e", "-b", b, "--topic", "bench-e2e-old", "--records", "300", "--record-size", "64",
                     "--target-rate", "0", "--timeout", "20")
    assert out["records"]["received"] == 300 and out["records"]["unique"] == 300
    assert "foreign_records" not in out  # the consumer starts at the end: old records are not read


def test_human_summary(module_broker: BrokerProcess) -> None:
    proc = bench("produce", "-b", module_broker.bootstrap, "--topic", "bench-human", "--records", "500",
                 "--record-size", "10", "--partitions", "1")
    assert proc.returncode == 0, proc.stderr
    assert "throughput:" in proc.stdout and "records/s" in proc.stdout and "MB/s" in proc.stdout
    assert "p99.9" in proc.stdout
    assert "500" in proc.stdout


def test_unreachable_broker_fails_in_one_line() -> None:
    proc = bench("produce", "-b", f"127.0.0.1:{free_port()}", "--records", "10", "--connect-timeout", "1",
                 timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "cannot reach broker" in proc.stderr


def test_consume_of_missing_topic_fails(module_broker: BrokerProcess) -> None:
    proc = bench("consume", "-b", module_broker.bootstrap, "--topic", "bench-no-such-topic", "--records", "1",
                 timeout=30)
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr


def test_rebalance_runs_both_protocols_at_a_small_size(tmp_path: Path) -> None:
    """`strom bench rebalance` at 2+1 members over 6 partitions: both protocols measured, every
    partition accounted for (kept or moved), the joiner consumed. Correctness of the tool only; the
    consumer protocol's heartbeat is short here so the run is quick."""
    from test_groups_consumer_protocol import CG_BROKER_OVERRIDES

    broker = BrokerProcess(tmp_path / "data", overrides=CG_BROKER_OVERRIDES).start()
    try:
        proc = bench("rebalance", "-b", broker.bootstrap, "--members", "2", "--partitions", "6", "--procs", "1",
                     "--steady", "0.5", "--rate", "20", "--timeout", "60", "--json", timeout=150)
    finally:
        broker.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)
    assert [r["protocol"] for r in results] == ["classic", "consumer"]
    for r in results:
        assert (r["members"], r["partitions"]) == (2, 6)
        assert r["unmoved"] + r["moved"] + r["revoked_unmoved"] == 6 and r["moved"] == 2, r
        assert 0 < r["assigned_s"] <= r["stable_s"] < 60
        assert r["joiner_first_record_s"] is not None and r["moved_pause_max_s"] is not None
        assert r["steady_gap_max_s"] > 0


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile([7.0], 99.9) == 7.0
    s = summarize(reversed(values))
    assert s is not None and s.count == 1000 and s.min == 1 and s.max == 1000 and s.mean == 500.5
    assert summarize([]) is None


def test_result_ok_needs_every_record() -> None:
    r = BenchResult("produce", "x", "t", {}, requested=10, sent=10, acknowledged=10)
    assert r.ok
    r.acknowledged, r.failed = 9, 1
    assert not r.ok
    short = BenchResult("produce", "x", "t", {}, requested=10, sent=4, acknowledged=4, stopped="duration")
    assert short.ok  # a run cut short by --duration is fine if all it sent went through
    e2e = BenchResult("e2e", "x", "t", {}, requested=5, sent=5, acknowledged=5, received=5, unique=4,
                      duplicates=1, lost=1)
    assert not e2e.ok
    assert json.loads(json.dumps(e2e.to_json()))["records"]["lost"] == 1
