"""One broker with thousands of partitions: a clean restart serves every record and rewrites nothing
for logs that did not change; a SIGKILL with unflushed appends in many partitions loses no
acknowledged record and cuts torn tails; timed and per-message flushes still happen with a flush loop
that looks only at logs that changed (the recovery-point checkpoint shows it). Speed goals are in
benchmarks/scale.py, not here."""

from __future__ import annotations

import os
from pathlib import Path

from brokerproc import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import confluent_consume, validate_partition_dir, wait_until

PARTITIONS = 2000


def produce_one_each(bootstrap: str, topic: str, partitions: list[int], value: bytes) -> None:
    """One record to each partition, acks=all; every one must be acknowledged."""
    errors: list[str] = []
    acked: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000})
    for p in partitions:
        producer.produce(topic, value, partition=p,
                         on_delivery=lambda err, msg: errors.append(str(err)) if err else acked.append(
                             (msg.partition(), msg.offset())))
        producer.poll(0)
    assert producer.flush(90) == 0
    assert not errors, errors[:3]
    assert len(acked) == len(partitions)


def create_topics(bootstrap: str, topics: dict[str, int], configs: dict[str, str] | None = None) -> None:
    """CreateTopics, answered once the logs are made: a large one may take long on a loaded machine."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 150000})
    futures = admin.create_topics([NewTopic(t, n, 1, config=dict(configs or {})) for t, n in topics.items()],
                                  operation_timeout=120, request_timeout=150)
    for f in futures.values():
        f.result(timeout=180)


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().splitlines()
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def read_every_partition(bootstrap: str, topic: str, expected: dict[int, list[bytes]]) -> None:
    total = sum(len(v) for v in expected.values())
    got = confluent_consume(bootstrap, topic, range(PARTITIONS), total, timeout=120)
    by_partition: dict[int, list[bytes]] = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.value())
    assert by_partition == expected


def file_times(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}


def stop_with_a_record_in_each(b: BrokerProcess) -> None:
    """Topic ``many`` of PARTITIONS partitions, the record ``first`` in each, then a clean stop."""
    create_topics(b.bootstrap, {"many": PARTITIONS})
    produce_one_each(b.bootstrap, "many", list(range(PARTITIONS)), b"first")
    assert b.stop() == 0


def test_clean_restart_of_2000_partitions_serves_every_record_and_rewrites_nothing_unchanged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    try:
        stop_with_a_record_in_each(b)
        assert (data / ".kafka_cleanshutdown").exists()
        # A clean stop leaves every log durable up to its end.
        points = read_checkpoint(data / "recovery-point-offset-checkpoint")
        assert {p: points[("many", p)] for p in range(PARTITIONS)} == dict.fromkeys(range(PARTITIONS), 1)

        b.start(timeout=120)
        b.wait_for_log("loading logs from", "(clean shutdown)")
        read_every_partition(b.bootstrap, "many", {p: [b"first"] for p in range(PARTITIONS)})
        before = {p: file_times(data / f"many-{p}") for p in (0, 999, PARTITIONS - 1)}
        assert b.stop() == 0
        # Logs unchanged since the clean start: no index, snapshot or epoch file written again.
        assert {p: file_times(data / f"many-{p}") for p in before} == before
        b.start(timeout=120)
        b.wait_for_log("loading logs from", "(clean shutdown)")
        read_every_partition(b.bootstrap, "many", {p: [b"first"] for p in range(PARTITIONS)})
    finally:
        b.stop()


def test_sigkill_with_unflushed_appends_in_many_partitions_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    try:
        stop_with_a_record_in_each(b)
        b.start(timeout=120)
        touched = list(range(0, PARTITIONS, 3))  # one more record each, in the page cache only
        produce_one_each(b.bootstrap, "many", touched, b"second")
        untouched = PARTITIONS - 1
        assert untouched not in touched
        epoch_file = data / f"many-{untouched}" / "leader-epoch-checkpoint"
        epoch_time = epoch_file.stat().st_mtime_ns
        b.kill()
        # Torn tails: a write cut short by the crash leaves bytes that are not a whole batch.
        torn = [1, 2, 4]
        for p in torn:
            with open(data / f"many-{p}" / f"{0:020d}.log", "ab") as f:
                f.write(b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x01\x00torn")
        assert not (data / ".kafka_cleanshutdown").exists()

        b.start(timeout=180)
        b.wait_for_log("loading logs from", "(unclean shutdown)")
        for p in torn:
            b.wait_for_log(f"many-{p}", "cut 16 invalid bytes")
        expected = {p: [b"first", b"second"] if p in touched else [b"first"] for p in range(PARTITIONS)}
        read_every_partition(b.bootstrap, "many", expected)
        for p in [*torn, 0, untouched]:
            assert validate_partition_dir(data / f"many-{p}").next_offset == len(expected[p])
        # Recovery re-learnt the same epochs: the file of a log it did not change is not rewritten.
        assert epoch_file.stat().st_mtime_ns == epoch_time
        # The records appended after the restart are durable once the broker stops cleanly.
        assert b.stop() == 0
        points = read_checkpoint(data / "recovery-point-offset-checkpoint")
        assert all(points[("many", p)] == len(expected[p]) for p in range(PARTITIONS))
    finally:
        b.stop()


def test_timed_and_per_message_flushes_with_the_flush_loop_of_changed_logs(tmp_path: Path) -> None:
    """flush.ms, flush.messages and the flush after a roll still move the recovery point among many
    idle logs; a log with none of them is flushed only at the clean stop."""
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides={"log.flush.offset.checkpoint.interval.ms": "100"}).start()
    try:
        create_topics(b.bootstrap, {"idle": 500})
        create_topics(b.bootstrap, {"timed": 4}, configs={"flush.ms": "200"})
        create_topics(b.bootstrap, {"each": 2}, configs={"flush.messages": "1"})
        create_topics(b.bootstrap, {"rolled": 1}, configs={"segment.bytes": "2000"})
        create_topics(b.bootstrap, {"plain": 1})
        produce_one_each(b.bootstrap, "timed", [0, 1, 2, 3], b"t")
        produce_one_each(b.bootstrap, "each", [0, 1], b"e")
        producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
        for _i in range(30):  # about 3 segments of 2,000 bytes
            producer.produce("rolled", b"r" * 200, partition=0)
            producer.flush(10)
        producer.produce("plain", b"p", partition=0)
        assert producer.flush(10) == 0
        del producer  # no reconnection attempts once the broker stops
        checkpoint = data / "recovery-point-offset-checkpoint"

        def flushed() -> dict[tuple[str, int], int] | None:
            points = read_checkpoint(checkpoint) if checkpoint.exists() else {}
            ok = all(points.get(("timed", p)) == 1 for p in range(4)) and \
                all(points.get(("each", p)) == 1 for p in range(2))
            return points if ok else None

        points = wait_until(flushed, 30, what="the flush.ms and flush.messages logs' recovery points")
        sealed = sorted(int(f.stem) for f in (data / "rolled-0").glob("*.log"))
        assert len(sealed) >= 3
        # The roll's flush: the recovery point reaches the active segment's base.
        wait_until(lambda: read_checkpoint(checkpoint).get(("rolled", 0), 0) >= sealed[-1], 30,
                   what="the flush after the last roll")
        assert points[("plain", 0)] == 0  # no flush policy, no roll: not flushed yet
        # A second record: flush.ms flushes it too (the log came back to the loop with its append).
        produce_one_each(b.bootstrap, "timed", [2], b"t2")
        wait_until(lambda: read_checkpoint(checkpoint).get(("timed", 2)) == 2, 30,
                   what="the second timed flush")
        assert read_checkpoint(checkpoint)[("plain", 0)] == 0
        assert b.stop() == 0
        assert read_checkpoint(checkpoint)[("plain", 0)] == 1
        assert os.path.exists(data / ".kafka_cleanshutdown")
    finally:
        b.stop()


def test_idempotent_producer_continues_across_a_clean_restart_and_a_sigkill_right_after_it(tmp_path: Path) -> None:
    """A clean stop after a write in every one of 2,000 logs, a clean start (indexes trusted, no tail
    re-read), then the same idempotent producer goes on in every partition: the producer state came
    back (a lost one would answer OUT_OF_ORDER_SEQUENCE or take the batch as a new producer's); with
    one small batch per log the start replays it rather than the stop writing a snapshot. A SIGKILL
    right after that start, then every record is there once."""
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    errors: list[str] = []
    acked: list[int] = []
    producer = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 200})

    def send(value: bytes) -> None:
        del acked[:]
        for p in range(PARTITIONS):
            producer.produce("idem", value, partition=p,
                             on_delivery=lambda err, msg: errors.append(str(err)) if err else acked.append(msg.partition()))
            producer.poll(0)
        assert producer.flush(150) == 0
        assert not errors, errors[:3]
        assert sorted(acked) == list(range(PARTITIONS))

    try:
        create_topics(b.bootstrap, {"idem": PARTITIONS})
        send(b"first")
        assert b.stop() == 0
        assert (data / ".kafka_cleanshutdown").exists()
        # Less than index.interval.bytes after no snapshot: the stop wrote none, the start replays.
        assert not list((data / "idem-7").glob("*.snapshot"))

        b.start(timeout=180)
        b.wait_for_log("loading logs from", "(clean shutdown)")
        send(b"second")  # the same producer id, the next sequence numbers
        b.kill()  # right after a clean start: nothing of the second round is flushed yet
        assert not (data / ".kafka_cleanshutdown").exists()

        b.start(timeout=180)
        b.wait_for_log("loading logs from", "(unclean shutdown)")
        send(b"third")
        read_every_partition(b.bootstrap, "idem", dict.fromkeys(range(PARTITIONS), [b"first", b"second", b"third"]))
        for p in (0, PARTITIONS - 1):
            assert validate_partition_dir(data / f"idem-{p}").next_offset == 3
    finally:
        producer.flush(5)
        b.stop()
