"""Transactions end to end against a real broker: committed records visible, aborted ones hidden
from read_committed consumers of confluent-kafka, kafka-python and aiokafka (and shown to
read_uncommitted ones), a read_committed reader stalling at an open transaction, zombie fencing,
and the coordinator aborting a transaction past its timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from confluent_kafka import KafkaException, Producer
from helpers import create_topics, wait_until
from txn_helpers import (
    TXN_BROKER,
    aiokafka_values,
    confluent_values,
    forge_hanging_transaction,
    kafka_python_end_offsets,
    kafka_python_values,
    txn_producer,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", overrides=TXN_BROKER).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def mixed_topic(txn_broker: BrokerProcess) -> str:
    """Two partitions holding, in order: a committed transaction, an aborted one, plain records,
    another aborted one, a committed one."""
    bs = txn_broker.bootstrap
    topic = "mixed"
    create_topics(bs, {topic: 2})
    producer = txn_producer(bs, "mixed-writer")
    plain = Producer({"bootstrap.servers": bs})
    for round_, commit in enumerate([True, False, None, False, True]):
        if commit is None:
            for i in range(4):
                plain.produce(topic, value=b"plain-%d" % i, partition=i % 2)
            assert plain.flush(10) == 0
            continue
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, value=b"%s-%d-%d" % (b"commit" if commit else b"abort", round_, i),
                             partition=i % 2)
        assert producer.flush(10) == 0  # in the log before the abort (abort_transaction drops unsent records)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    return topic


def _expected(mixed: list[bytes], committed_only: bool) -> list[bytes]:
    return [v for v in mixed if not (committed_only and v.startswith(b"abort"))]


def test_aborted_hidden_from_read_committed(txn_broker: BrokerProcess, mixed_topic: str) -> None:
    bs = txn_broker.bootstrap
    everything = confluent_values(bs, mixed_topic, 2, "read_uncommitted", expect=28)
    assert len(everything) == 28 and sum(v.startswith(b"abort") for v in everything) == 12
    committed = confluent_values(bs, mixed_topic, 2, "read_committed", expect=16)
    assert committed == _expected(everything, True)
    assert kafka_python_values(bs, mixed_topic, 2, "read_committed") == committed
    assert kafka_python_values(bs, mixed_topic, 2, "read_uncommitted") == everything
    assert aiokafka_values(bs, mixed_topic, 2, "read_committed") == committed
    assert aiokafka_values(bs, mixed_topic, 2, "read_uncommitted") == everything


def test_read_committed_stalls_at_open_transaction(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    topic = "stall"
    create_topics(bs, {topic: 1})
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"before")
    assert plain.flush(10) == 0
    producer = txn_producer(bs, "staller")
    producer.begin_transaction()
    producer.produce(topic, value=b"in-txn")
    assert producer.flush(10) == 0
    plain.produce(topic, value=b"after")  # behind the open transaction: not readable yet
    assert plain.flush(10) == 0
    assert confluent_values(bs, topic, 1, "read_committed", quiet_s=1.5) == [b"before"]
    assert kafka_python_end_offsets(bs, topic, 1, "read_committed") == {0: 1}  # the LSO
    assert kafka_python_end_offsets(bs, topic, 1, "read_uncommitted") == {0: 3}  # the high watermark
    producer.commit_transaction(20)
    assert confluent_values(bs, topic, 1, "read_committed", expect=3) == [b"before", b"in-txn", b"after"]
    assert kafka_python_end_offsets(bs, topic, 1, "read_committed") == {0: 4}  # after the marker


def test_zombie_fenced(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    topic = "zombies"
    create_topics(bs, {topic: 1})
    old = txn_producer(bs, "worker-1")
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    assert old.flush(10) == 0
    new = txn_producer(bs, "worker-1")  # a new instance: fences the old one and aborts its transaction
    new.begin_transaction()
    new.produce(topic, value=b"fresh")
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as info:
        old.produce(topic, value=b"late")
        old.flush(5)
        old.commit_transaction(10)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower(), info.value
    assert confluent_values(bs, topic, 1, "read_committed") == [b"fresh"]
    assert b"zombie" in confluent_values(bs, topic, 1, "read_uncommitted")


def test_timed_out_transaction_aborted(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    topic = "timeouts"
    create_topics(bs, {topic: 1})
    producer = txn_producer(bs, "slowpoke", **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce(topic, value=b"forgotten")
    assert producer.flush(10) == 0
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"later")
    assert plain.flush(10) == 0
    started = time.monotonic()
    # The coordinator aborts it: the LSO moves past the marker and "later" becomes readable.
    wait_until(lambda: kafka_python_end_offsets(bs, topic, 1, "read_committed") == {0: 3}, 15,
               what="the timed-out transaction aborted")
    assert time.monotonic() - started < 10
    assert confluent_values(bs, topic, 1, "read_committed") == [b"later"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # fenced by the abort's epoch bump
    from test_metrics import admin_url, scrape, value

    assert value(scrape(admin_url(txn_broker)), "strom_transactions_timed_out_total") >= 1


def test_invalid_transaction_timeout(txn_broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": "too-long",
                         "transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(10)
    assert "timeout" in str(info.value).lower()


def test_txnindex_on_disk(txn_broker: BrokerProcess, mixed_topic: str) -> None:
    part = Path(txn_broker.data_dir) / f"{mixed_topic}-0"
    files = list(part.glob("*.txnindex"))
    assert files and files[0].stat().st_size == 2 * 34  # two aborted transactions, Kafka's entry size


def test_api_versions_advertise_transaction_apis() -> None:
    from strom.broker.handlers import discover

    table = discover()
    # InitProducerId, AddPartitionsToTxn (the v4+ batched form too), AddOffsetsToTxn, EndTxn,
    # WriteTxnMarkers, TxnOffsetCommit
    for key, max_version in ((22, 5), (24, 5), (25, 4), (26, 4), (27, 1), (28, 4)):
        assert key in table and table[key].max_version >= max_version, key


def test_cli_lists_and_describes_and_describe_producers(txn_broker: BrokerProcess) -> None:
    from click.testing import CliRunner
    from kio.schema.describe_producers.v0 import request as dp

    from strom.cli.transactions import transactions
    from strom.client.raw_connection import RawConnection

    bs = txn_broker.bootstrap
    create_topics(bs, {"described": 1})
    producer = txn_producer(bs, "described-writer")
    producer.begin_transaction()
    producer.produce("described", value=b"x")
    assert producer.flush(10) == 0
    try:
        runner = CliRunner(env={"COLUMNS": "250"})
        listed = runner.invoke(transactions, ["--bootstrap-server", bs, "list"])
        assert listed.exit_code == 0, listed.output
        row = next(line for line in listed.output.splitlines() if "described-writer" in line)
        assert "Ongoing" in row
        described = runner.invoke(transactions, ["--bootstrap-server", bs, "describe", "described-writer"])
        assert described.exit_code == 0, described.output
        assert "Ongoing" in described.output and "described-0" in described.output
        missing = runner.invoke(transactions, ["--bootstrap-server", bs, "describe", "nobody"])
        assert missing.exit_code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.output
        # DescribeProducers shows where the open transaction starts on the partition.
        host, port = bs.split(":")
        conn = RawConnection(host, int(port), 10)
        try:
            response = conn.request(61, 0, dp.DescribeProducersRequest(
                topics=(dp.TopicRequest(name="described", partition_indexes=(0,)),)))  # type: ignore[arg-type]
        finally:
            conn.close()
        active = response.topics[0].partitions[0].active_producers
        assert [int(p.current_txn_start_offset) for p in active] == [0]
    finally:
        producer.commit_transaction(20)


def test_cli_find_hanging_and_abort(txn_broker: BrokerProcess) -> None:
    """Kafka's find-hanging: an open transaction older than the max timeout that no coordinator
    knows is listed; an equally old one its coordinator still has open is not. Kafka's abort then
    ends the hanging one."""
    from click.testing import CliRunner

    from strom.cli.transactions import transactions

    bs = txn_broker.bootstrap
    create_topics(bs, {"hung": 2})
    ghost = forge_hanging_transaction(bs, "hung", 0, producer_id=876_543, age_ms=2 * 3_600_000)
    live = txn_producer(bs, "hung-live", **{"transaction.timeout.ms": 60_000})
    live.begin_transaction()
    live.produce("hung", value=b"old clock", partition=1, timestamp=int(time.time() * 1000) - 2 * 3_600_000)
    assert live.flush(10) == 0
    runner = CliRunner(env={"COLUMNS": "250"})

    def rows(*args: str) -> list[list[str]]:
        result = runner.invoke(transactions, ["--bootstrap-server", bs, "find-hanging", *args])
        assert result.exit_code == 0, result.output
        return [[c.strip() for c in line.split("│")[1:-1]] for line in result.output.splitlines()
                if line.startswith("│")]

    try:
        (row,) = rows("--topic", "hung")
        assert row[:3] == ["hung", "0", "876543"] and row[5] == str(ghost) and row[7] == "120", row
        assert rows("--topic", "hung", "--partition", "1") == []
        assert rows("--topic", "hung", "--max-transaction-timeout", "180") == []  # 3 h: not old enough
        assert [r[:3] for r in rows("--broker-id", "0")] == [["hung", "0", "876543"]]
        missing = runner.invoke(transactions, ["--bootstrap-server", bs, "find-hanging", "--topic", "nope"])
        assert missing.exit_code != 0 and "does not exist" in missing.output
    finally:
        live.commit_transaction(20)
    # kafka-transactions.sh abort: an ABORT marker ends it, and read_committed readers move on.
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bs, "group.id": "hung-reader", "isolation.level": "read_committed"})

    def stable_end() -> int:  # ListOffsets latest, read_committed: the LSO
        return int(reader.get_watermark_offsets(TopicPartition("hung", 0), timeout=10)[1])

    assert stable_end() == ghost
    nothing = runner.invoke(transactions, ["--bootstrap-server", bs, "abort", "--topic", "hung", "--partition", "0",
                                           "--start-offset", str(ghost + 1)])
    assert nothing.exit_code != 0 and "no open transaction starts" in nothing.output
    aborted = runner.invoke(transactions, ["--bootstrap-server", bs, "abort", "--topic", "hung", "--partition", "0",
                                           "--start-offset", str(ghost)])
    assert aborted.exit_code == 0 and "producer 876543" in aborted.output, aborted.output
    assert rows("--topic", "hung") == []
    assert stable_end() == ghost + 2  # past the data and the marker
    reader.close()


def test_metrics_count_transactions(txn_broker: BrokerProcess, mixed_topic: str) -> None:
    from test_metrics import admin_url, scrape, value

    samples = scrape(admin_url(txn_broker))
    assert value(samples, "strom_transactions_committed_total") >= 2  # from mixed_topic's writer
    assert value(samples, "strom_transactions_aborted_total") >= 2
    assert value(samples, "strom_last_stable_offset", topic=mixed_topic, partition="0") == \
        value(samples, "strom_high_watermark", topic=mixed_topic, partition="0")


def test_clients_cannot_write_markers(txn_broker: BrokerProcess) -> None:
    import datetime

    from kio.schema.produce.v9 import request as produce

    from strom.client.raw_connection import RawConnection
    from strom.records.control import build_marker_batch

    create_topics(txn_broker.bootstrap, {"forged": 1})
    body = produce.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),  # type: ignore[arg-type]
        topic_data=(produce.TopicProduceData(name="forged", partition_data=(produce.PartitionProduceData(  # type: ignore[arg-type]
            index=0, records=build_marker_batch(5, 0, True, 0, 0)),)),))  # type: ignore[arg-type]
    host, port = txn_broker.bootstrap.split(":")
    conn = RawConnection(host, int(port), 10)
    try:
        response = conn.request(0, 9, body)
    finally:
        conn.close()
    assert int(response.responses[0].partition_responses[0].error_code) == 87  # INVALID_RECORD


def test_fenced_producer_cannot_leave_offsets_pending(txn_broker: BrokerProcess) -> None:
    """A zombie's TxnOffsetCommit that arrives after its transaction was aborted (the epoch bumped)
    is refused: otherwise its offsets would wait for a marker that never comes and every
    read_committed consumer of the group would get UNSTABLE_OFFSET_COMMIT for ever."""
    import datetime

    from kio.schema.add_offsets_to_txn.v3 import request as add_offsets
    from kio.schema.init_producer_id.v4 import request as init
    from kio.schema.offset_fetch.v7 import request as fetch
    from kio.schema.txn_offset_commit.v3 import request as txn_commit

    from strom.client.raw_connection import RawConnection

    bs = txn_broker.bootstrap
    create_topics(bs, {"zombie-input": 1})
    host, port = bs.split(":")
    conn = RawConnection(host, int(port), 10)

    def init_producer() -> tuple[int, int]:
        def attempt() -> Any:
            r = conn.request(22, 4, init.InitProducerIdRequest(  # type: ignore[call-arg]
                transactional_id="zombie-offsets", transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))
            return r if int(r.error_code) == 0 else None
        r = wait_until(attempt, 10, interval=0.1, what="InitProducerId")
        return int(r.producer_id), int(r.producer_epoch)

    def commit_offsets(pid: int, epoch: int) -> int:
        r = conn.request(28, 3, txn_commit.TxnOffsetCommitRequest(  # type: ignore[call-arg]
            transactional_id="zombie-offsets", group_id="zombie-group", producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None, topics=(txn_commit.TxnOffsetCommitRequestTopic(
                name="zombie-input", partitions=(txn_commit.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata=""),)),)))
        return int(r.topics[0].partitions[0].error_code)

    try:
        pid, old_epoch = init_producer()
        r = conn.request(25, 3, add_offsets.AddOffsetsToTxnRequest(  # type: ignore[call-arg]
            transactional_id="zombie-offsets", producer_id=pid, producer_epoch=old_epoch, group_id="zombie-group"))
        assert int(r.error_code) == 0
        assert init_producer()[1] > old_epoch  # a new instance: the open transaction is aborted, the epoch bumped
        assert commit_offsets(pid, old_epoch) == 90  # PRODUCER_FENCED
        r = conn.request(9, 7, fetch.OffsetFetchRequest(  # type: ignore[call-arg]
            group_id="zombie-group", require_stable=True,
            topics=(fetch.OffsetFetchRequestTopic(name="zombie-input", partition_indexes=(0,)),)))
        assert int(r.topics[0].partitions[0].error_code) == 0  # not UNSTABLE_OFFSET_COMMIT
    finally:
        conn.close()
