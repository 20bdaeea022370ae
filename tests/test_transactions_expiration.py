"""transactional.id.expiration.ms and producer.id.expiration.ms against a real broker, with short
values: an idle transactional id is removed by a tombstone in __transaction_state (and stays removed
after a restart), an ongoing transaction never expires, and partitions forget idle producers but
never one with an open transaction (as DescribeProducers shows)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from confluent_kafka import Producer
from helpers import create_topics, wait_until
from txn_helpers import TXN_BROKER, txn_producer

pytestmark = pytest.mark.timeout(120)

EXPIRING = {**TXN_BROKER,
            "transactional.id.expiration.ms": "2000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
            "producer.id.expiration.ms": "2000",
            "producer.id.expiration.check.interval.ms": "500"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=EXPIRING).start()
    try:
        yield b
    finally:
        b.stop()


def cli(bootstrap: str, *args: str) -> Any:
    from click.testing import CliRunner

    from strom.cli.transactions import transactions

    return CliRunner(env={"COLUMNS": "250"}).invoke(transactions, ["--bootstrap-server", bootstrap, *args])


def listed(bootstrap: str) -> dict[str, str]:
    """transactional id -> state, from `strom transactions list`."""
    result = cli(bootstrap, "list")
    assert result.exit_code == 0, result.output
    rows = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").replace("┃", "│").split("│")]
        if len(cells) == 4 and cells[1].isdigit():
            rows[cells[0]] = cells[2]
    return rows


def producers(bootstrap: str, topic: str) -> dict[int, int]:
    """DescribeProducers of partition 0: producer id -> first offset of its open transaction."""
    from kio.schema.describe_producers.v0 import request as dp

    from strom.client.raw_connection import RawConnection

    host, port = bootstrap.split(":")
    conn = RawConnection(host, int(port), 10)
    try:
        response = conn.request(61, 0, dp.DescribeProducersRequest(
            topics=(dp.TopicRequest(name=topic, partition_indexes=(0,)),)))  # type: ignore[arg-type]
    finally:
        conn.close()
    partition = response.topics[0].partitions[0]
    assert int(partition.error_code) == 0
    return {int(p.producer_id): int(p.current_txn_start_offset) for p in partition.active_producers}


def test_idle_ids_and_producers_expire_but_open_transactions_never(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"expiring": 1})
    done = txn_producer(bs, "finished-writer")
    done.begin_transaction()
    done.produce("expiring", value=b"committed")
    done.commit_transaction(20)
    plain = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    plain.produce("expiring", value=b"idempotent")
    assert plain.flush(10) == 0
    open_ = txn_producer(bs, "open-writer", **{"transaction.timeout.ms": 60_000})
    open_.begin_transaction()
    open_.produce("expiring", value=b"undecided")
    assert open_.flush(10) == 0
    assert set(listed(bs)) >= {"finished-writer", "open-writer"}
    assert len(producers(bs, "expiring")) == 3

    started = time.monotonic()
    wait_until(lambda: "finished-writer" not in listed(bs), 15, what="the idle transactional id removed")
    # A short expiration and check interval: gone within a few seconds, not at some later sweep.
    assert time.monotonic() - started < 8
    gone = cli(bs, "describe", "finished-writer")
    assert gone.exit_code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in gone.output
    # Left: only the producer of the open transaction (first offset 3: after data, marker, idempotent).
    wait_until(lambda: list(producers(bs, "expiring").values()) == [3], 15, what="idle producers forgotten")
    # A transactional id finished now expires a whole expiration later: once it has gone, the open
    # transaction has outlived that much idleness too, and is still there.
    create_topics(bs, {"expiring-later": 1})  # its producer state stays off the partition checked below
    later = txn_producer(bs, "later-writer")
    later.begin_transaction()
    later.produce("expiring-later", value=b"committed later")
    later.commit_transaction(20)
    wait_until(lambda: "later-writer" in listed(bs), 15, what="the later transactional id listed")
    wait_until(lambda: "later-writer" not in listed(bs), 15, what="the later transactional id expired")
    assert listed(bs).get("open-writer") == "Ongoing"
    assert list(producers(bs, "expiring").values()) == [3]
    open_.commit_transaction(20)
    from test_metrics import admin_url, scrape, value

    assert value(scrape(admin_url(broker)), "strom_transactional_ids_expired_total") >= 1

    # The tombstone is in __transaction_state: after a restart the id is still unknown.
    broker.stop()
    broker.start()
    assert "finished-writer" not in listed(bs)
    gone = cli(bs, "describe", "finished-writer")
    assert gone.exit_code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in gone.output
    # A producer with the expired id starts afresh (epoch 0) and works.
    again = txn_producer(bs, "finished-writer")
    described = cli(bs, "describe", "finished-writer")
    assert described.exit_code == 0, described.output
    row = next(line for line in described.output.splitlines() if "finished-writer" in line)
    assert [c.strip() for c in row.split("│")][3] == "0", row  # the EPOCH column
    again.begin_transaction()
    again.produce("expiring", value=b"fresh")
    again.commit_transaction(20)
