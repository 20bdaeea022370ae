"""Kafka's text files: offset checkpoints, partition.metadata, meta.properties, leader epochs."""

from __future__ import annotations

import uuid
from pathlib import Path

from strom.storage.atomic import write_atomic
from strom.storage.checkpoint import (
    OffsetCheckpointFile,
    PartitionMetadataFile,
    read_properties,
    topic_id_from_str,
    topic_id_to_str,
    write_properties,
)
from strom.storage.leader_epoch import LeaderEpochFileCache


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("b", 1): 7, ("a-b.c", 0): 42})
    assert path.read_text() == "0\n2\na-b.c 0 42\nb 1 7\n"
    assert OffsetCheckpointFile(path).read() == {("a-b.c", 0): 42, ("b", 1): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_offset_checkpoint_empty_missing_and_malformed(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert OffsetCheckpointFile(path).read() == {}
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}
    for bad in ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", ""]:
        path.write_text(bad)
        assert OffsetCheckpointFile(path).read() == {}, bad


def test_write_atomic_replaces_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"first version, long")
    write_atomic(path, b"second")
    assert path.read_bytes() == b"second"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_topic_id_is_kafka_base64() -> None:
    u = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    text = topic_id_to_str(u)
    assert text == "a6e4EJ2tEdGAtADAT9QwyA"  # Kafka's Uuid.toString: URL-safe base64, no padding
    assert topic_id_from_str(text) == u


def test_partition_metadata(tmp_path: Path) -> None:
    u = uuid.uuid4()
    f = PartitionMetadataFile(tmp_path)
    assert f.read() is None
    f.write(u)
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id_to_str(u)}\n"
    assert f.read() == u
    (tmp_path / "partition.metadata").write_text("version: 7\ntopic_id: x\n")
    assert f.read() is None


def test_properties_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    assert read_properties(path) is None
    write_properties(path, {"version": "0", "broker.id": "3", "cluster.id": "abc=="})
    text = path.read_text()
    assert text.startswith("#\n#")
    assert read_properties(path) == {"version": "0", "broker.id": "3", "cluster.id": "abc=="}


def test_leader_epoch_cache(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path)
    assert cache.latest_epoch == -1
    assert cache.end_offset_for(0, 10) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch: no new entry
    cache.assign(2, 10)
    cache.assign(1, 12)  # older epoch: ignored
    cache.assign(5, 20)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 20\n"
    assert cache.end_offset_for(5, 30) == (5, 30)
    assert cache.end_offset_for(0, 30) == (0, 10)
    assert cache.end_offset_for(1, 30) == (0, 10)  # unknown epoch: the one before it, and where it ended
    assert cache.end_offset_for(3, 30) == (2, 20)
    assert cache.end_offset_for(9, 30) == (-1, -1)
    assert LeaderEpochFileCache(tmp_path).entries == cache.entries
    cache.truncate_from_end(15)
    assert [tuple(e) for e in cache.entries] == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert [tuple(e) for e in cache.entries] == [(2, 12)]
    cache.flush()
    assert LeaderEpochFileCache(tmp_path).entries == cache.entries


def test_leader_epoch_deferred_until_records_follow(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(3, 10, defer=True)  # a new leader at its log end: no record in the epoch yet
    assert not path.exists() and cache.deferred
    assert cache.latest_epoch == 3 and cache.end_offset_for(3, 10) == (3, 10)
    cache.write_deferred()
    assert path.read_text() == "0\n1\n3 10\n" and not cache.deferred
    cache.write_deferred()  # nothing held back: nothing written
    cache.assign(4, 12, defer=True)
    assert path.read_text() == "0\n1\n3 10\n"
    cache.truncate_from_start(11)  # any other change writes every entry, the deferred one too
    assert path.read_text() == "0\n2\n3 11\n4 12\n" and not cache.deferred
    cache.assign(6, 12, defer=True)  # replaces epoch 4, which held no record either
    assert [tuple(e) for e in cache.entries] == [(3, 11), (6, 12)]
    assert LeaderEpochFileCache(tmp_path).entries == [(3, 11), (4, 12)]  # as written


def test_leader_epoch_cache_ignores_damaged_file(tmp_path: Path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n3 10\n1 20\n")  # epochs go backwards
    assert LeaderEpochFileCache(tmp_path).entries == []
    (tmp_path / "leader-epoch-checkpoint").write_bytes(b"\x00garbage")
    assert LeaderEpochFileCache(tmp_path).entries == []
