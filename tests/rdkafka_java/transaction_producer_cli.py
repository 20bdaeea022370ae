"""librdkafka's 0098_consumer_txn drives a Java program, TransactionProducerCli, built against
Kafka's client jars, to write transactions that the test then reads with librdkafka's consumer.
Kafka's jars cannot be fetched on these machines, so tests/rdkafka_runner.py points the test's
``java/run-class.sh`` here: the same command language, carried out with confluent-kafka.

    transaction_producer_cli.py BOOTSTRAP COMMAND...

Commands (comma-separated fields): ``topic,NAME``, ``testid,ID``, ``sleep,MS``, ``exit,CODE`` (leave
at once: no flush, no abort, so an open transaction stays open), and
``producerN,PARTITION,KEY_START,COUNT,TXN,FLUSH`` where PARTITION -1 lets the partitioner choose,
keys are one byte each from KEY_START, values are 0x10 0x20 0x30 0x40, TXN is None, BeginAbort,
BeginCommit, BeginOpen, ContinueAbort, ContinueCommit or ContinueOpen, and FLUSH is DoFlush or
DontFlush. A producer is made on first use, transactional unless its first TXN is None.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

from confluent_kafka import Producer

PAYLOAD = bytes([0x10, 0x20, 0x30, 0x40])
BEGINS = {"BeginAbort", "BeginCommit", "BeginOpen"}
TXN_TYPES = BEGINS | {"None", "ContinueAbort", "ContinueCommit", "ContinueOpen"}


def make_producer(bootstrap: str, testid: str | None, name: str, transactional: bool) -> Any:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": ("transactional-producer-" if transactional else "producer-") + name,
        "enable.idempotence": True,
        "linger.ms": 5,  # records of one command share batches, as the Java program's do
    }
    if transactional:
        config["transactional.id"] = f"test-transactional-id-{testid}-{name}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(60)
    return producer


def send(producer: Any, topic: str, partition: int, key_start: int, count: int, txn: str, flush: str) -> None:
    if txn in BEGINS:
        producer.begin_transaction()
    for i in range(count):
        key = bytes([(key_start + i) & 0xFF])
        if partition == -1:
            producer.produce(topic, PAYLOAD, key)
        else:
            producer.produce(topic, PAYLOAD, key, partition=partition)
    if flush == "DoFlush":
        producer.flush(60)
    if txn in ("BeginAbort", "ContinueAbort"):
        producer.abort_transaction(60)
    elif txn in ("BeginCommit", "ContinueCommit"):
        producer.commit_transaction(60)


def main(argv: list[str]) -> int:
    bootstrap, commands = argv[0], argv[1:]
    producers: dict[str, Any] = {}
    topic: str | None = None
    testid: str | None = None
    for command in commands:
        print(f"transaction_producer_cli: command: {command!r}", flush=True)
        fields = re.split(r"\s*,\s*", command.strip())
        if fields[0] == "sleep":
            time.sleep(int(fields[1], 0) / 1000)
        elif fields[0] == "exit":
            os._exit(int(fields[1], 0))  # as System.exit: nothing flushed, committed or aborted
        elif fields[0] == "topic":
            topic = fields[1]
        elif fields[0] == "testid":
            testid = fields[1]
        elif fields[0].startswith("producer"):
            name, partition, key_start, count, txn, flush = fields
            if topic is None or txn not in TXN_TYPES or flush not in ("DoFlush", "DontFlush"):
                raise SystemExit(f"transaction_producer_cli: bad command {command!r}")
            if name not in producers:
                producers[name] = make_producer(bootstrap, testid, name, txn != "None")
            send(producers[name], topic, int(partition, 0), int(key_start, 0), int(count, 0), txn, flush)
        else:
            raise SystemExit(f"transaction_producer_cli: unknown command {command!r}")
    # Like the Java producer's close(): what was sent is delivered, an open transaction stays open
    # (the coordinator aborts it when it times out); leave without librdkafka's own teardown.
    for producer in producers.values():
        producer.flush(60)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
