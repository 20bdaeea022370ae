"""Stop and restart the broker: records, offsets, topic ids, configs, indexes and producer state survive."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from helpers import (
    Delivered,
    RawConnection,
    confluent_admin,
    confluent_consume,
    confluent_produce,
    create_topics,
    validate_log_dir,
    values_batch,
)

from strom.records import codec


def _snapshot(bs: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes | None, bytes | None, int]]]:
    with RawConnection(bs) as raw:
        return {p: [(r.offset, r.key, r.value, r.timestamp) for r in raw.fetch_records(topic, p)]
                for p in range(partitions)}


def test_clean_restart_keeps_everything(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"persist-a": 3, "persist-b": 1}, configs={"retention.ms": "86400000"})
    t0 = int(time.time() * 1000) - 10_000
    recs = [{"key": f"k{i}".encode(), "value": f"a-{i}".encode(), "timestamp": t0 + i,
             "headers": [("n", str(i).encode())]} for i in range(300)]
    delivered = confluent_produce(bs, "persist-a", recs, {"partitioner": "murmur2_random"})
    confluent_produce(bs, "persist-b", [{"value": f"b-{i}".encode()} for i in range(50)])
    with RawConnection(bs) as raw:
        ids = {t: raw.topic_id(t) for t in ("persist-a", "persist-b")}
    before_a = _snapshot(bs, "persist-a", 3)
    before_b = _snapshot(bs, "persist-b", 1)
    assert sum(len(v) for v in before_a.values()) == 300

    assert broker.stop() == 0
    broker.start()

    assert _snapshot(bs, "persist-a", 3) == before_a
    assert _snapshot(bs, "persist-b", 1) == before_b
    with RawConnection(bs) as raw:
        assert {t: raw.topic_id(t) for t in ids} == ids
        for p, recs_p in before_a.items():
            assert raw.log_end_offset("persist-a", p) == len(recs_p)
            assert raw.list_offset("persist-a", p, -2)[0] == 0
    # Consumers see the same records at the same offsets (fetch by topic id included: librdkafka uses Fetch 13+).
    msgs = confluent_consume(bs, "persist-a", range(3), 300)
    assert sorted((m.partition(), m.offset(), m.value()) for m in msgs) == \
        sorted((d.partition, d.offset, d.value) for d in delivered)
    # Topic configs survived too.
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = confluent_admin(bs)
    res = ConfigResource(ResourceType.TOPIC, "persist-a")
    assert admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)["retention.ms"].value == "86400000"
    # New records continue at the log end offset.
    more = confluent_produce(bs, "persist-b", [{"value": b"after-restart", "partition": 0}])
    assert more[0].offset == 50


def test_restart_with_many_segments_keeps_index_lookups(broker_factory) -> None:
    # Small segments and a dense index: several segments per partition, lookups by offset and time after restart.
    b = broker_factory(overrides={"log.segment.bytes": "4096", "log.index.interval.bytes": "128"})
    bs = b.bootstrap
    topic = "persist-segments"
    create_topics(bs, {topic: 2})
    t0 = int(time.time() * 1000) - 100_000
    # One record per batch (many batches, many index entries), two partitions alternating.
    delivered = []
    with RawConnection(bs) as raw:
        for i in range(600):
            value, ts = f"seg-{i:04d}".encode() * 8, t0 + i * 10
            r = raw.produce(topic, i % 2, codec.build_batch([(None, value)], timestamp_ms=ts))
            assert int(r.error_code) == 0
            delivered.append(Delivered(None, value, i % 2, r.base_offset, [], ts))
    assert len(list((b.data_dir / f"{topic}-0").glob("*.log"))) > 3
    before = _snapshot(bs, topic, 2)
    assert b.stop() == 0
    checks = validate_log_dir(b.data_dir)
    assert checks[f"{topic}-0"].next_offset == 300 and checks[f"{topic}-1"].next_offset == 300
    b.start()
    assert _snapshot(bs, topic, 2) == before

    with RawConnection(bs) as raw:
        for p in (0, 1):
            part = [d for d in delivered if d.partition == p]
            for k in (0, 1, 57, 150, 299):
                # By offset: the first record fetched from offset k is record k.
                recs_k = raw.fetch_records(topic, p, k)
                assert recs_k[0].offset == k and recs_k[0].value == part[k].value
                # By timestamp: exact and in-between timestamps.
                assert raw.list_offset(topic, p, part[k].timestamp)[0] == k
                assert raw.list_offset(topic, p, part[k].timestamp - 1)[0] == k
            assert raw.list_offset(topic, p, t0 + 10 * 10_000)[0] == -1  # after the last record
    # And through a real client's offsets_for_times.
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bs, "group.id": "persist-ts", "enable.auto.commit": False})
    try:
        found = c.offsets_for_times([TopicPartition(topic, 1, t0 + 401 * 10)], timeout=10)
        assert found[0].offset == 200  # record 401 is at offset 200 of partition 1 (odd indexes)
    finally:
        c.close()


def test_topic_ids_stable_and_deleted_topics_stay_deleted(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"keep-me": 2, "drop-me": 2})
    confluent_produce(bs, "drop-me", [{"value": b"x"}])
    with RawConnection(bs) as raw:
        keep_id = raw.topic_id("keep-me")
    admin = confluent_admin(bs)
    admin.delete_topics(["drop-me"], request_timeout=15)["drop-me"].result(timeout=20)
    assert broker.stop() == 0
    broker.start()
    with RawConnection(bs) as raw:
        assert raw.topic_id("keep-me") == keep_id
        md = raw.metadata(["drop-me"])
        assert int(md.topics[0].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        all_md = raw.metadata(None)
        assert {t.name for t in all_md.topics} >= {"keep-me"}
        assert "drop-me" not in {t.name for t in all_md.topics}
    assert not (broker.data_dir / "drop-me-0").exists() or not list((broker.data_dir / "drop-me-0").glob("*.log"))


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_producer_state_survives_restart(broker, how: str) -> None:
    """An idempotent retry after a restart is acknowledged with its original offset, not written twice."""
    bs = broker.bootstrap
    topic = f"pid-{how}"
    with RawConnection(bs) as raw:
        assert int(raw.create_topic(topic, 1).error_code) == 0
        pid, epoch = raw.init_producer_id()
        b0 = values_batch([b"a0", b"a1", b"a2"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        b1 = values_batch([b"b0", b"b1"], producer_id=pid, producer_epoch=epoch, base_sequence=3)
        r0 = raw.produce(topic, 0, b0)
        r1 = raw.produce(topic, 0, b1)
        assert (int(r0.error_code), r0.base_offset) == (0, 0)
        assert (int(r1.error_code), r1.base_offset) == (0, 3)
    if how == "clean":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    with RawConnection(bs) as raw:
        # Retries of the last batches: same offsets, nothing appended.
        r1b = raw.produce(topic, 0, b1)
        assert (int(r1b.error_code), r1b.base_offset) == (0, 3)
        r0b = raw.produce(topic, 0, b0)
        assert (int(r0b.error_code), r0b.base_offset) == (0, 0)
        assert raw.log_end_offset(topic, 0) == 5
        # The next sequence continues; a gap is refused.
        b2 = values_batch([b"c0"], producer_id=pid, producer_epoch=epoch, base_sequence=5)
        r2 = raw.produce(topic, 0, b2)
        assert (int(r2.error_code), r2.base_offset) == (0, 5)
        gap = values_batch([b"d0"], producer_id=pid, producer_epoch=epoch, base_sequence=9)
        assert int(raw.produce(topic, 0, gap).error_code) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        values = [r.value for r in raw.fetch_records(topic, 0)]
        assert values == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
        # A new producer id is not one handed out before the restart.
        pid2, _ = raw.init_producer_id()
        assert pid2 != pid


def test_log_files_are_kafka_format(broker) -> None:
    """The .log files hold the batches exactly as served (offsets assigned), readable without the broker;
    the index files hold whole 8- and 12-byte entries. A segment with no offset index entry (less than
    index.interval.bytes of batches after its first) has no index files: a start reads its headers."""
    bs = broker.bootstrap
    create_topics(bs, {"format": 1}, configs={"index.interval.bytes": "64"})
    create_topics(bs, {"small": 1})
    confluent_produce(bs, "format", [{"key": b"k", "value": f"v{i}".encode()} for i in range(20)],
                      config={"batch.num.messages": 1})  # a batch per record: index entries
    confluent_produce(bs, "small", [{"key": b"k", "value": b"one"}])
    with RawConnection(bs) as raw:
        served = bytes(raw.fetch("format", 0, 0).records or b"")
    assert broker.stop() == 0
    seg = broker.data_dir / "format-0" / ("0" * 20 + ".log")
    assert seg.read_bytes() == served
    assert [r.value for r in codec.read_all(seg.read_bytes())] == [f"v{i}".encode() for i in range(20)]
    index_size = (broker.data_dir / "format-0" / ("0" * 20 + ".index")).stat().st_size
    time_index_size = (broker.data_dir / "format-0" / ("0" * 20 + ".timeindex")).stat().st_size
    assert index_size and index_size % 8 == 0 and time_index_size and time_index_size % 12 == 0
    assert sorted(p.suffix for p in (broker.data_dir / "small-0").glob("0*")) == [".log"]
    assert (broker.data_dir / "format-0" / "partition.metadata").exists()
    assert (broker.data_dir / "meta.properties").exists()
    validate_log_dir(broker.data_dir)
