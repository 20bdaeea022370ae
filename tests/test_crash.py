"""Crash safety: SIGKILL under an acks=all stream loses no acknowledged record; torn tails are cut at restart."""

from __future__ import annotations

import random
import threading
import time

import pytest
from confluent_kafka import Producer
from helpers import (
    RawConnection,
    confluent_produce,
    create_topics,
    validate_log_dir,
    validate_partition_dir,
    wait_until,
)

from strom.records import codec

TOPIC = "crash-stream"


def _stream_until_killed(b, round_no: int, min_acks: int) -> list[tuple[int, int, bytes]]:
    """Produce one record at a time (acks=all, flush per message) until the broker is SIGKILLed."""
    acked: list[tuple[int, int, bytes]] = []
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            failed.append(str(err))

    def run() -> None:
        producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                             "message.timeout.ms": 3000, "socket.timeout.ms": 3000, "retries": 0})
        i = 0
        while not stop.is_set():
            producer.produce(TOPIC, value=f"r{round_no}-{i}".encode(), partition=i % 2, on_delivery=on_delivery)
            producer.flush(1.0)
            i += 1
        producer.purge()
        producer.flush(1.0)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) >= min_acks, 60, what=f"{min_acks} acknowledged records")
        time.sleep(random.Random(round_no).uniform(0.0, 0.2))
        b.kill()
    finally:
        stop.set()
        t.join(20)
    assert not t.is_alive()
    return list(acked)


def test_sigkill_during_acks_all_stream(broker_factory) -> None:
    b = broker_factory(overrides={"log.flush.interval.messages": "1"})
    create_topics(b.bootstrap, {TOPIC: 2})
    all_acked: list[tuple[int, int, bytes]] = []
    for round_no in range(2):
        all_acked += _stream_until_killed(b, round_no, min_acks=150)
        b.start()
        with RawConnection(b.bootstrap) as raw:
            logs = {p: raw.fetch_records(TOPIC, p) for p in (0, 1)}
            for p, recs in logs.items():
                # Offsets contiguous from 0 and the high watermark right after the last record.
                assert [r.offset for r in recs] == list(range(len(recs))), f"partition {p} has holes"
                assert raw.log_end_offset(TOPIC, p) == len(recs)
        for p, off, value in all_acked:
            assert off < len(logs[p]), f"acknowledged record {value!r} at {p}/{off} is missing"
            assert logs[p][off].value == value, f"acknowledged {value!r} at {p}/{off}, found {logs[p][off].value!r}"
        # The broker takes new writes after recovery, at the log end.
        d = confluent_produce(b.bootstrap, TOPIC, [{"value": f"after-{round_no}".encode(), "partition": 0}])
        assert d[0].offset == len(logs[0])
    assert len(all_acked) >= 300
    assert b.stop() == 0
    checks = validate_log_dir(b.data_dir)
    for p in (0, 1):
        c = checks[f"{TOPIC}-{p}"]
        assert c.start_offset == 0 and c.next_offset >= len([a for a in all_acked if a[0] == p])


def _tail(kind: str, next_offset: int) -> bytes:
    rng = random.Random(kind)
    batch = codec.build_batch([(None, b"torn-" + bytes(str(i), "ascii") * 20) for i in range(10)],
                              base_offset=next_offset, timestamp_ms=int(time.time() * 1000))
    if kind == "half_batch":
        return batch[: len(batch) // 2]
    if kind == "header_only":
        return batch[:30]
    if kind == "garbage":
        return rng.randbytes(777)
    if kind == "zeros":  # e.g. a preallocated or lost-page tail after power loss
        return bytes(4096)
    if kind == "bad_crc":
        bad = bytearray(batch)
        bad[-3] ^= 0xFF
        return bytes(bad)
    if kind == "length_overrun":
        bad = bytearray(batch)
        bad[8:12] = (len(batch) * 10).to_bytes(4, "big")
        return bytes(bad)
    raise AssertionError(kind)


@pytest.mark.parametrize("stop", ["clean", "kill"])
@pytest.mark.parametrize("kind", ["half_batch", "header_only", "garbage", "zeros", "bad_crc", "length_overrun"])
def test_torn_tail_is_cut_at_restart(broker, kind: str, stop: str) -> None:
    bs = broker.bootstrap
    topic = "torn"
    create_topics(bs, {topic: 1})
    for chunk in range(5):
        confluent_produce(bs, topic, [{"value": f"v{chunk}-{i}".encode()} for i in range(10)])
    with RawConnection(bs) as raw:
        before = [(r.offset, r.value) for r in raw.fetch_records(topic, 0)]
    assert len(before) == 50
    if stop == "clean":
        assert broker.stop() == 0
    else:
        broker.kill()
    pdir = broker.data_dir / f"{topic}-0"
    seg = max(pdir.glob("*.log"), key=lambda p: int(p.stem))
    good_size = seg.stat().st_size
    if stop == "kill":
        # Everything written before the kill is whole (page cache), so the file is all good batches.
        assert validate_partition_dir(pdir).next_offset == 50
    with seg.open("ab") as f:
        f.write(_tail(kind, 50))

    broker.start()
    with RawConnection(bs) as raw:
        assert [(r.offset, r.value) for r in raw.fetch_records(topic, 0)] == before
        assert raw.log_end_offset(topic, 0) == 50
        assert raw.fetch_records(topic, 0, 45)[0].offset == 45
    assert seg.stat().st_size == good_size, "the torn tail was not truncated"
    d = confluent_produce(bs, topic, [{"value": b"after"}])
    assert d[0].offset == 50
    assert broker.stop() == 0
    check = validate_partition_dir(pdir)
    assert check.next_offset == 51
    broker.start()
    with RawConnection(bs) as raw:
        assert [r.value for r in raw.fetch_records(topic, 0)] == [v for _, v in before] + [b"after"]


@pytest.mark.parametrize("damage", ["delete", "odd_size", "empty"])
def test_damaged_index_files_are_rebuilt(broker_factory, damage: str) -> None:
    """Indexes are derived data: missing or malformed index files are rebuilt from the log at start."""
    b = broker_factory(overrides={"log.segment.bytes": "4096", "log.index.interval.bytes": "100"})
    topic = "indexed"
    create_topics(b.bootstrap, {topic: 1})
    t0 = int(time.time() * 1000) - 50_000
    with RawConnection(b.bootstrap) as raw:
        for i in range(300):
            batch = codec.build_batch([(None, f"idx-{i:04d}".encode() * 4)], timestamp_ms=t0 + i * 10)
            assert raw.produce(topic, 0, batch).base_offset == i
    assert b.stop() == 0
    pdir = b.data_dir / f"{topic}-0"
    indexes = sorted(pdir.glob("*.index")) + sorted(pdir.glob("*.timeindex"))
    assert len(list(pdir.glob("*.log"))) > 3 and indexes
    for f in indexes:
        if damage == "delete":
            f.unlink()
        elif damage == "odd_size":
            with f.open("ab") as fh:
                fh.write(b"\x01\x02\x03")
        else:
            f.write_bytes(b"")
    b.start()
    with RawConnection(b.bootstrap) as raw:
        for k in (0, 1, 77, 150, 151, 298, 299):
            recs = raw.fetch_records(topic, 0, k)
            assert recs[0].offset == k and recs[0].value == f"idx-{k:04d}".encode() * 4
            assert raw.list_offset(topic, 0, t0 + k * 10)[0] == k
            assert raw.list_offset(topic, 0, t0 + k * 10 - 5)[0] == k
        assert raw.log_end_offset(topic, 0) == 300
    d = confluent_produce(b.bootstrap, topic, [{"value": b"after"}])
    assert d[0].offset == 300
