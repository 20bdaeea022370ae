"""A consume-transform-produce worker for the exactly-once tests, run as its own process (so tests
can SIGKILL it): reads ``in`` with read_committed from the offsets its group committed, writes
``out-<value>`` to ``out`` and commits the input offsets in the same transaction.

    python eos_worker.py BOOTSTRAP INPUT OUTPUT PARTITIONS TRANSACTIONAL_ID GROUP [PAUSE_S]

PAUSE_S (default 0.03) is slept inside each transaction, so a kill often lands in the middle of one.
A transaction that takes longer than 20 s kills the worker (SIGALRM): after a broker restart
librdkafka's send_offsets_to_transaction has been seen to block past its own timeout; the test
starts the worker again, which is one more crash at a random point.

Exits 3 on a fatal error (fenced, or the broker gone too long); the test starts it again.
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def main() -> int:
    bootstrap, source, sink, partitions, txn_id, group = sys.argv[1:7]
    pause_s = float(sys.argv[7]) if len(sys.argv) > 7 else 0.03
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(30)  # fences an earlier instance and aborts what it left open
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    tps = [TopicPartition(source, p) for p in range(int(partitions))]

    def rewind() -> None:
        committed = consumer.committed(tps, timeout=30)
        consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                         for tp in committed])

    rewind()
    print("worker ready", flush=True)
    while True:
        msgs = [m for m in consumer.consume(num_messages=10, timeout=0.3) if m.error() is None]
        if not msgs:
            continue
        signal.alarm(20)  # the default action of SIGALRM ends the process, even inside librdkafka
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
            time.sleep(pause_s)
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 10)
            producer.commit_transaction(10)
            signal.alarm(0)
        except KafkaException as e:
            err = e.args[0]
            if err.fatal() or not err.txn_requires_abort() and not err.retriable():
                print(f"worker fatal: {err}", flush=True)
                return 3
            try:
                producer.abort_transaction(10)
            except KafkaException as abort_error:
                print(f"worker: abort failed: {abort_error}", flush=True)
                return 3
            rewind()
            signal.alarm(0)


if __name__ == "__main__":
    sys.exit(main())
