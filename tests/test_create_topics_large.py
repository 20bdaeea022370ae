"""Creating a topic with many partitions: the file work runs off the event loop (other clients are
served meanwhile), the name is taken from the moment the request is accepted, and every partition
is on disk, durable and usable after a restart."""

from __future__ import annotations

import os
import resource
import select
import shutil
import threading
import time
from typing import Any

from helpers import (
    RawConnection,
    confluent_admin,
    confluent_consume,
    confluent_produce,
    create_topics,
    ms,
    request_class,
    values_batch,
    wait_until,
)

from strom.protocol import wire
from strom.storage.checkpoint import topic_id_to_str

BIG = 1000
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
TOPIC_ALREADY_EXISTS = 36
KAFKA_STORAGE_ERROR = 56
INVALID_PARTITIONS = 37


def create_topics_body(name: str, partitions: int, version: int = 7) -> Any:
    req = request_class("create_topics", version, "CreateTopicsRequest")
    ct = request_class("create_topics", version, "CreatableTopic")
    topic = ct(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
    return req(topics=(topic,), timeout=ms(30000), validate_only=False)


def create_partitions_body(name: str, count: int, version: int = 3) -> Any:
    req = request_class("create_partitions", version, "CreatePartitionsRequest")
    topic = request_class("create_partitions", version, "CreatePartitionsTopic")
    return req(topics=(topic(name=name, count=count, assignments=None),), timeout=ms(30000), validate_only=False)


def delete_topics_body(name: str, version: int = 6) -> Any:
    req = request_class("delete_topics", version, "DeleteTopicsRequest")
    state = request_class("delete_topics", version, "DeleteTopicState")
    return req(topics=(state(name=name, topic_id=None),), timeout=ms(30000))


def read_response(conn: RawConnection, corr: int, api_key: int, version: int) -> Any:
    got, body = wire.decode_response(api_key, version, conn.read_frame())
    assert got == corr
    return body


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def partition_dirs(data_dir: Any, topic: str) -> list[Any]:
    return [d for d in data_dir.iterdir() if d.is_dir() and d.name.rpartition("-")[0] == topic]


class Prober(threading.Thread):
    """Another client on its own connection: ApiVersions, Metadata of another topic and of the topic
    being created, back to back. Records (sent, answered, error code of the watched topic)."""

    def __init__(self, bootstrap: str, other: str, watched: str, timeout: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.other = other
        self.watched = watched
        self.deadline = time.monotonic() + timeout
        self.samples: list[tuple[float, float, int | None]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with RawConnection(self.bootstrap, timeout=30) as conn:
                while not self.stop.is_set() and time.monotonic() < self.deadline:
                    start = time.monotonic()
                    conn.api_versions()
                    self.samples.append((start, time.monotonic(), None))
                    start = time.monotonic()
                    (other,) = conn.metadata([self.other]).topics
                    assert int(other.error_code) == NONE, other
                    self.samples.append((start, time.monotonic(), None))
                    start = time.monotonic()
                    (watched,) = conn.metadata([self.watched]).topics
                    self.samples.append((start, time.monotonic(), int(watched.error_code)))
                    time.sleep(0.005)
        except BaseException as e:  # reported by finish()
            self.error = e

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive(), "the prober is stuck"
        if self.error is not None:
            raise self.error


def test_large_create_keeps_serving_other_clients_and_survives_restart(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"other": 1})
    admin = confluent_admin(bs)
    admin.list_topics(timeout=10)  # connected before the clock starts
    prober = Prober(bs, "other", "big")
    prober.start()
    wait_until(lambda: len(prober.samples) >= 9, 10, what="the prober running")
    from confluent_kafka.admin import NewTopic

    fds_before = open_fds(broker.proc.pid)
    started = time.monotonic()
    future = admin.create_topics([NewTopic("big", BIG, 1)], operation_timeout=60, request_timeout=60)["big"]
    future.result(timeout=60)
    took = time.monotonic() - started
    prober.finish()
    # Partitions without records hold no open file (Kafka holds one per partition).
    assert open_fds(broker.proc.pid) < fds_before + 50

    overlapping = [(s, e, code) for s, e, code in prober.samples if e >= started and s <= started + took]
    in_flight = [code for _, _, code in overlapping if code == LEADER_NOT_AVAILABLE]
    # Seen as "being created" by requests answered meanwhile: the loop served them while the
    # partitions were made, which a blocked loop cannot do, however fast the disk. (How long each
    # answer took is the machine's business, not asserted here.)
    assert len(in_flight) >= 3, f"{len(in_flight)} answers while the {took:.2f}s creation was in flight"

    with RawConnection(bs) as raw:
        topic_id = raw.topic_id("big")
    broker.stop(timeout=60)
    dirs = partition_dirs(broker.data_dir, "big")
    assert len(dirs) == BIG
    expected = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n"
    assert all((d / "partition.metadata").read_text() == expected for d in dirs)
    # The segment file and the leader epoch of a partition are made with its first record.
    assert all(sorted(f.name for f in d.iterdir()) == ["partition.metadata"] for d in dirs)
    broker.start(timeout=60)

    with RawConnection(bs) as raw:
        (md,) = raw.metadata(["big"]).topics
        assert int(md.error_code) == NONE and md.topic_id == topic_id
        assert sorted(int(p.partition_index) for p in md.partitions) == list(range(BIG))
    sample = [0, 1, 499, BIG - 2, BIG - 1]
    records = [{"value": b"v%d" % p, "partition": p} for p in sample]
    delivered = confluent_produce(bs, "big", records)
    assert [(d.partition, d.offset) for d in delivered] == [(p, 0) for p in sample]
    got = confluent_consume(bs, "big", sample, len(sample))
    assert sorted((m.partition(), m.value()) for m in got) == [(p, b"v%d" % p) for p in sample]
    with_records = {f"big-{p}" for p in sample}
    assert {d.name for d in dirs if (d / "leader-epoch-checkpoint").exists()} == with_records
    assert {d.name for d in dirs if (d / f"{0:020d}.log").exists()} == with_records
    assert (broker.data_dir / "big-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"

    broker.kill()  # nothing flushed: the start recovers the records, and the epoch with them
    broker.start(timeout=60)
    got = confluent_consume(bs, "big", sample, len(sample))
    assert sorted((m.partition(), m.value()) for m in got) == [(p, b"v%d" % p) for p in sample]
    delivered = confluent_produce(bs, "big", [{"value": b"w", "partition": p} for p in (0, 2)])
    assert sorted((d.partition, d.offset) for d in delivered) == [(0, 1), (2, 0)]
    assert (broker.data_dir / "big-2" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"


def test_two_creates_of_one_name_make_one_topic(broker) -> None:
    bs = broker.bootstrap
    with RawConnection(bs, timeout=60) as first, RawConnection(bs) as second, RawConnection(bs) as watcher:
        first_corr = first.send(19, 7, create_topics_body("race", BIG))
        # The first creation is under way (its name reserved, its files being made)...
        wait_until(lambda: int(watcher.metadata(["race"]).topics[0].error_code) == LEADER_NOT_AVAILABLE,
                   10, interval=0.001, what="the creation in flight")
        # ...when the second arrives: refused at once, without waiting for the first.
        (lost,) = read_response(second, second.send(19, 7, create_topics_body("race", BIG)), 19, 7).topics
        assert int(lost.error_code) == TOPIC_ALREADY_EXISTS, lost
        assert select.select([first.sock], [], [], 0)[0] == [], "the first creation ended before the second"
        # Auto-creation by a Metadata request does not make a second one either.
        (md,) = watcher.metadata(["race"], auto_create=True).topics
        assert int(md.error_code) in (LEADER_NOT_AVAILABLE, NONE), md
        (won,) = read_response(first, first_corr, 19, 7).topics
        assert int(won.error_code) == NONE, won
        assert int(won.num_partitions) == BIG
        (md,) = watcher.metadata(["race"]).topics
        assert int(md.error_code) == NONE and md.topic_id == won.topic_id
        assert len(md.partitions) == BIG
    dirs = partition_dirs(broker.data_dir, "race")
    assert len(dirs) == BIG
    assert not [d for d in broker.data_dir.iterdir() if d.name.endswith("-stray")]


def test_create_partitions_one_change_at_a_time(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"grow": 1})
    with RawConnection(bs, timeout=60) as raw:
        # Pipelined on one connection: the second waits for the first, then finds the topic larger.
        to_600 = raw.send(37, 3, create_partitions_body("grow", 600))
        to_300 = raw.send(37, 3, create_partitions_body("grow", 300))
        (first,) = read_response(raw, to_600, 37, 3).results
        (second,) = read_response(raw, to_300, 37, 3).results
        assert int(first.error_code) == NONE, first
        assert int(second.error_code) == INVALID_PARTITIONS, second
        assert len(raw.metadata(["grow"]).topics[0].partitions) == 600
    assert len(partition_dirs(broker.data_dir, "grow")) == 600
    delivered = confluent_produce(bs, "grow", [{"value": b"last", "partition": 599}])
    assert delivered[0].offset == 0


def test_topic_deleted_while_its_partitions_are_added(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"doomed": 1})
    with RawConnection(bs, timeout=60) as raw:
        grow = raw.send(37, 3, create_partitions_body("doomed", BIG))
        delete = raw.send(20, 6, delete_topics_body("doomed"))  # runs while the partitions are made
        (grown,) = read_response(raw, grow, 37, 3).results
        (deleted,) = read_response(raw, delete, 20, 6).responses
        assert int(deleted.error_code) == NONE, deleted
        assert int(grown.error_code) == UNKNOWN_TOPIC_OR_PARTITION, grown
        assert int(raw.metadata(["doomed"]).topics[0].error_code) == UNKNOWN_TOPIC_OR_PARTITION
    wait_until(lambda: not [d for d in broker.data_dir.iterdir() if d.name.startswith("doomed-")], 20,
               what="the partition directories removed")
    create_topics(bs, {"doomed": 2})  # the name is free again
    assert confluent_produce(bs, "doomed", [{"value": b"x", "partition": 1}])[0].offset == 0


def test_partition_directories_unknown_to_the_metadata_are_set_aside(broker) -> None:
    """What a crash between making a topic's logs and recording the topic leaves behind."""
    bs = broker.bootstrap
    create_topics(bs, {"t": 2})
    confluent_produce(bs, "t", [{"value": b"x", "partition": 0}])
    broker.stop()
    data = broker.data_dir
    shutil.copytree(data / "t-0", data / "ghost-0")  # a topic the metadata never recorded
    shutil.copytree(data / "t-0", data / "t-5")  # a partition beyond the topic's count
    shutil.copytree(data / "t-1", data / "ghost-1")  # empty: nothing to keep
    broker.start()
    assert not any((data / name).exists() for name in ("ghost-0", "t-5", "ghost-1"))
    strays = sorted(d.name.split(".")[0] for d in data.iterdir() if d.name.endswith("-stray"))
    assert strays == ["ghost-0", "t-5"]
    assert "not in the cluster metadata" in broker.log_text()
    create_topics(bs, {"ghost": 3})
    delivered = confluent_produce(bs, "ghost", [{"value": b"new", "partition": 0}])
    assert delivered[0].offset == 0  # a new log, not the stray's
    with RawConnection(bs) as raw:
        assert len(raw.metadata(["t"]).topics[0].partitions) == 2
    broker.restart()  # strays stay aside
    assert len([d for d in data.iterdir() if d.name.endswith("-stray")]) == 2
    assert len(confluent_consume(bs, "t", [0, 1], 1)) == 1


def produce_to_each_body(topic: str, partitions: range, value: bytes, version: int = 9) -> Any:
    req = request_class("produce", version, "ProduceRequest")
    tpd = request_class("produce", version, "TopicProduceData")
    ppd = request_class("produce", version, "PartitionProduceData")
    data = tuple(ppd(index=p, records=values_batch([value])) for p in partitions)
    return req(transactional_id=None, acks=1, timeout=ms(10000), topic_data=(tpd(name=topic, partition_data=data),))


def test_partitions_past_the_open_file_limit_are_refused_one_by_one(broker) -> None:
    """A partition's segment file is opened with its first record. Near the process's limit on open
    files that append is answered KAFKA_STORAGE_ERROR (descriptors are kept for flushes and
    connections), the others in the request are written, the broker still stops cleanly, and the
    partition takes records once the limit allows."""
    count = 300
    create_topics(broker.bootstrap, {"many": count})
    pid = broker.proc.pid
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 150, hard))
    with RawConnection(broker.bootstrap) as raw:
        first = raw.request(0, 9, produce_to_each_body("many", range(count), b"first"))
        codes = {int(p.index): int(p.error_code) for p in first.responses[0].partition_responses}
        written = {p for p, code in codes.items() if code == NONE}
        refused = {p for p, code in codes.items() if code == KAFKA_STORAGE_ERROR}
        assert written and refused and written | refused == set(range(count)), codes
        broker.wait_for_log("could not append to", "Too many open files")
        (md,) = raw.metadata(["many"]).topics  # still serving on the same connection
        assert int(md.error_code) == NONE
    assert broker.stop() == 0  # at the limit: every written partition flushed, the stop is clean
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start(timeout=60)  # with the usual limit
    with RawConnection(broker.bootstrap) as raw:
        second = raw.request(0, 9, produce_to_each_body("many", range(count), b"second"))
        offsets = {int(p.index): (int(p.error_code), int(p.base_offset)) for p in second.responses[0].partition_responses}
        assert offsets == {p: (NONE, 1 if p in written else 0) for p in range(count)}
        for p in sorted(refused)[:5] + sorted(written)[:5]:
            got = [r.value for r in raw.fetch_records("many", p)]
            assert got == ([b"first", b"second"] if p in written else [b"second"]), p
