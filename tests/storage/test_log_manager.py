"""LogManager: directory layout, checkpoints, clean and unclean restarts, topic deletion."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from storage_helpers import append, batch, values

from strom.storage.checkpoint import OffsetCheckpointFile, read_properties, topic_id_to_str
from strom.storage.errors import InconsistentMetadata
from strom.storage.log import LogConfig
from strom.storage.log_manager import LogManager

TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def manager(dirs: list[Path], **kw: object) -> LogManager:
    lm = LogManager(dirs, LogConfig(segment_bytes=500), **kw)  # type: ignore[arg-type]
    lm.startup()
    return lm


def test_layout_and_clean_restart(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    props = read_properties(tmp_path / "meta.properties")
    assert props is not None and props["version"] == "0" and props["broker.id"] == "0"
    cluster_id = props["cluster.id"]
    log = lm.create_log("orders", 3, TOPIC_ID)
    assert log.directory == tmp_path / "orders-3"
    assert (tmp_path / "orders-3" / "partition.metadata").read_text() == (
        f"version: 0\ntopic_id: {topic_id_to_str(TOPIC_ID)}\n"
    )
    assert lm.create_log("orders", 3, TOPIC_ID) is log
    for _ in range(10):
        append(log, batch(3))
    lm.shutdown()
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text())["version"] == 0
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        assert OffsetCheckpointFile(tmp_path / name).read() == {("orders", 3): 30}
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {("orders", 3): 0}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 30\n"

    again = manager([tmp_path])
    assert again.cluster_id == cluster_id
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # consumed by the start
    restored = again.get_log("orders", 3)
    assert restored is not None
    assert restored.log_end_offset == restored.recovery_point == 30
    assert len(values(restored)) == 30
    assert again.topic_id("orders") == TOPIC_ID
    assert again.topic_id_of_dir(restored.directory) == TOPIC_ID
    assert again.high_watermark_checkpoints == {("orders", 3): 30}


def test_unclean_restart_recovers_from_checkpoint(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    log = lm.create_log("t", 0, TOPIC_ID)
    for _ in range(5):
        append(log, batch(2))
    log.flush()
    lm.checkpoint()
    for _ in range(5):
        append(log, batch(2))
    log.close_handlers()  # killed: no shutdown, no marker
    torn = log.segments()[-1].log_path
    with torn.open("ab") as f:
        f.write(batch(1)[:20])
    again = manager([tmp_path])
    restored = again.get_log("t", 0)
    assert restored is not None
    assert restored.log_end_offset == 20
    assert restored.recovery_point == 10  # the checkpoint; later data was re-validated, not yet flushed
    assert len(values(restored)) == 20


def test_several_log_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    for p in range(4):
        append(lm.create_log("t", p, TOPIC_ID), batch(1))
    assert sorted(len(list(d.glob("t-*"))) for d in dirs) == [2, 2]
    lm.shutdown()
    again = manager(dirs)
    assert sorted((log.topic, log.partition) for log in again.all_logs()) == [("t", p) for p in range(4)]
    for d in dirs:
        assert read_properties(d / "meta.properties") == read_properties(dirs[0] / "meta.properties")


def test_schedule_delete_and_leftovers(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    for p in range(2):
        append(lm.create_log("gone", p, TOPIC_ID), batch(1))
    append(lm.create_log("kept", 0, TOPIC_ID), batch(1))
    paths = lm.schedule_delete("gone")
    assert len(paths) == 2
    assert all(p.exists() and p.name.startswith("gone-") and p.name.endswith("-delete") for p in paths)
    assert lm.get_log("gone", 0) is None
    assert not (tmp_path / "gone-0").exists()
    lm.remove_dirs(paths[:1])
    assert not paths[0].exists()
    lm.checkpoint()
    assert ("gone", 1) not in OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    lm.shutdown()
    again = manager([tmp_path])  # a -delete dir left behind by a crash is removed at start
    assert not paths[1].exists()
    assert [(log.topic, log.partition) for log in again.all_logs()] == [("kept", 0)]


def test_unrelated_directories_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "lost+found").mkdir()
    (tmp_path / "t-0-future").mkdir()
    lm = manager([tmp_path])
    assert lm.all_logs() == []


def test_meta_properties_of_another_broker_stops_the_start(tmp_path: Path) -> None:
    manager([tmp_path], broker_id=1).shutdown()
    with pytest.raises(InconsistentMetadata, match="broker.id"):
        manager([tmp_path], broker_id=2)
    with pytest.raises(InconsistentMetadata, match="cluster.id"):
        manager([tmp_path], broker_id=1, cluster_id="other")


def test_retention_pass_and_config_update(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    log = lm.create_log("t", 0, TOPIC_ID)
    for _ in range(20):
        append(log, batch(2, ts=0))  # timestamps from 1970: far past retention
    assert len(log.segments()) > 2
    assert lm.cleanup_logs() > 0
    assert log.log_start_offset == 40
    lm.update_config("t", LogConfig(message_timestamp_type="LogAppendTime"))
    assert append(log, batch(1)).log_append_time > 0


def test_log_start_offset_survives_a_crash(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    log = lm.create_log("t", 0, TOPIC_ID)
    for _ in range(20):
        append(log, batch(2))
    log.delete_records(33)
    lm.checkpoint()
    log.close_handlers()  # killed
    again = manager([tmp_path])
    restored = again.get_log("t", 0)
    assert restored is not None
    assert restored.log_start_offset == 33
    assert values(restored)[0] == b"v0"  # the batch holding 33 (32..33) comes back whole


# ---- placement over several log dirs and batch creation ----------------------------------------

OTHER_ID = uuid.UUID("00000000-0000-0000-0000-0000000000bb")


def partitions_per_dir(dirs: list[Path]) -> list[int]:
    return [sum(1 for c in d.iterdir() if c.is_dir() and not c.name.endswith(("-delete", "-stray"))) for d in dirs]


def test_new_partitions_go_to_the_dir_with_the_fewest(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    lm = manager(dirs)
    lm.create_logs("big", range(5), TOPIC_ID)
    assert list(lm.log_dir_counts().values()) == partitions_per_dir(dirs) == [2, 2, 1]
    lm.create_log("small", 0, OTHER_ID)  # the first dir among those with the fewest
    assert lm.get_log("small", 0).directory.parent == dirs[2]  # type: ignore[union-attr]
    lm.shutdown()

    again = manager(dirs)  # counted again at start
    assert list(again.log_dir_counts().values()) == [2, 2, 2]
    paths = again.schedule_delete("big")
    assert sorted(p.parent.name for p in paths) == ["a", "a", "b", "b", "c"]
    assert list(again.log_dir_counts().values()) == [0, 0, 1]
    for p in range(3):
        again.create_log("next", p, OTHER_ID)
    assert [again.get_log("next", p).directory.parent.name for p in range(3)] == ["a", "b", "a"]  # type: ignore[union-attr]
    assert list(again.log_dir_counts().values()) == [2, 1, 1]


def test_create_logs_in_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import strom.storage.log_manager as lm_module

    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    synced: list[Path] = []
    real_fsync_dir = lm_module.fsync_dir

    def counting_fsync_dir(directory: Path) -> None:
        synced.append(Path(directory))
        real_fsync_dir(directory)

    filesystems: list[Path] = []
    real_sync_filesystem = lm_module.sync_filesystem

    def counting_sync_filesystem(directory: Path) -> bool:
        filesystems.append(Path(directory))
        return real_sync_filesystem(directory)

    monkeypatch.setattr(lm_module, "fsync_dir", counting_fsync_dir)
    monkeypatch.setattr(lm_module, "sync_filesystem", counting_sync_filesystem)
    logs = lm.create_logs("t", [3, 0, 2, 1, *range(4, 40)], TOPIC_ID)
    assert [log.partition for log in logs] == [3, 0, 2, 1, *range(4, 40)]  # in the order asked
    assert partitions_per_dir(dirs) == [20, 20]
    if lm_module.has_syncfs():
        # Linux: one syncfs of the file system both log dirs are on, no fsync per directory.
        assert (synced, filesystems) == ([], [dirs[0]])
    else:
        # Every new partition directory once, each log dir once: not a log dir fsync per partition.
        assert sorted(synced) == sorted([log.directory for log in logs] + dirs)
    for log in logs:
        assert lm.topic_id_of_dir(log.directory) == TOPIC_ID
        assert lm.get_log("t", log.partition) is log
    # Existing partitions are returned as they are; new ones are made.
    synced.clear()
    more = lm.create_logs("t", range(38, 42), TOPIC_ID)
    assert more[:2] == logs[-2:]
    assert [log.partition for log in more] == [38, 39, 40, 41]
    assert len(synced) == 2 + 2  # two new partitions, one in each log dir
    with pytest.raises(InconsistentMetadata, match="topic id"):
        lm.create_logs("t", [0], OTHER_ID)
    lm.shutdown()
    again = manager(dirs)
    assert len(again.all_logs()) == 42
    assert again.topic_id("t") == TOPIC_ID


def test_make_logs_off_the_owning_thread(tmp_path: Path) -> None:
    """prepare_logs reserves (placement and counts), make_logs touches only files, add_logs registers."""
    import threading

    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    new = lm.prepare_logs("t", range(10), TOPIC_ID)
    assert list(lm.log_dir_counts().values()) == [5, 5]  # reserved before any file exists
    assert partitions_per_dir(dirs) == [0, 0]
    with pytest.raises(InconsistentMetadata, match="already being created"):
        lm.prepare_logs("t", [4], TOPIC_ID)
    other = lm.prepare_logs("u", [0], OTHER_ID)  # placed knowing about the reservation
    lm.cancel_logs(other)
    thread = threading.Thread(target=lm.make_logs, args=(new,))
    thread.start()
    thread.join(30)
    assert partitions_per_dir(dirs) == [5, 5]
    assert lm.get_log("t", 0) is None and lm.all_logs() == []  # not visible until added
    logs = lm.add_logs(new)
    assert [log.partition for log in logs] == list(range(10))
    assert lm.get_log("t", 9) is logs[9]
    assert list(lm.log_dir_counts().values()) == [5, 5]


def test_failed_make_logs_leaves_nothing_behind(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    (tmp_path / "t-7").write_text("in the way")  # mkdir of t-7 fails half way through the batch
    new = lm.prepare_logs("t", range(10), TOPIC_ID)
    with pytest.raises(FileExistsError):
        lm.make_logs(new)
    lm.cancel_logs(new)
    assert sorted(c.name for c in tmp_path.iterdir() if c.is_dir()) == []
    assert lm.log_dir_counts() == {tmp_path: 0}
    (tmp_path / "t-7").unlink()
    assert len(lm.create_logs("t", range(10), TOPIC_ID)) == 10  # the reservation was released


def test_removing_made_logs(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    new = lm.prepare_logs("t", range(3), TOPIC_ID)
    lm.make_logs(new)
    new.remove()  # e.g. the topic was deleted while they were made
    lm.cancel_logs(new)
    assert list(tmp_path.glob("t-*")) == []
    assert lm.log_dir_counts() == {tmp_path: 0}


def test_stray_logs_are_set_aside(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    append(lm.create_log("ghost", 0, TOPIC_ID), batch(2))
    lm.create_log("kept", 0, OTHER_ID)
    assert lm.partition_topic_id("ghost", 0) == TOPIC_ID
    path = lm.set_aside_stray("ghost", 0)
    assert path is not None and path.parent == dirs[0] and path.name.startswith("ghost-0.") and path.name.endswith("-stray")
    assert (path / "00000000000000000000.log").stat().st_size > 0  # the data is kept
    assert lm.get_log("ghost", 0) is None and lm.partition_topic_id("ghost", 0) is None
    assert list(lm.log_dir_counts().values()) == [0, 1]
    lm.create_log("empty", 0, TOPIC_ID)
    assert lm.set_aside_stray("empty", 0) is None  # nothing worth keeping: deleted
    assert not [d for d in dirs[0].iterdir() if d.name.startswith("empty-")]
    lm.shutdown()
    again = manager(dirs)
    assert [(log.topic, log.partition) for log in again.all_logs()] == [("kept", 0)]
    assert path.exists()
    assert again.create_log("ghost", 0, OTHER_ID).directory == dirs[0] / "ghost-0"


def test_the_timed_flush_looks_only_at_logs_that_changed(tmp_path: Path) -> None:
    """logs_to_flush: a log comes back with its appends or rolls and goes once nothing is due."""
    lm = manager([tmp_path])
    timed = LogConfig(segment_bytes=500, flush_interval_ms=1000)
    plain = lm.create_logs("plain", range(50), TOPIC_ID)
    flushed = lm.create_logs("timed", range(2), uuid.UUID(int=7), timed)
    assert lm.logs_to_flush(100.0) == []  # new, empty logs: nothing for the timer
    append(plain[3], batch(1))
    append(flushed[1], batch(1))
    assert lm.logs_to_flush(101.0) == [flushed[1]]  # flush.ms: due at once, the first time
    assert lm.logs_to_flush(101.5) == []  # not yet flushed, but its interval has not passed
    assert lm.logs_to_flush(102.0) == [flushed[1]]
    flushed[1].flush()
    assert flushed[1].recovery_point == 1
    assert lm.logs_to_flush(103.0) == []
    append(flushed[1], batch(1))
    assert lm.logs_to_flush(104.0) == [flushed[1]]
    # A roll makes a log due whatever its flush policy: the recovery point follows sealed segments.
    while len(plain[7].segments()) < 2:
        append(plain[7], batch(40))
    assert plain[7] in lm.logs_to_flush(105.0)
    plain[7].flush()
    assert plain[7].recovery_point == plain[7].log_end_offset
    assert lm.logs_to_flush(106.0) == [flushed[1]]
    lm.shutdown()
    points = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert points[("plain", 3)] == 1 and points[("timed", 1)] == 2


def test_a_clean_stop_of_many_logs_leaves_each_durable_to_its_end(tmp_path: Path) -> None:
    """Many logs (closed in threads): recovery points at the log ends, data there after."""
    lm = manager([tmp_path])
    logs = lm.create_logs("t", range(40), TOPIC_ID)
    for plog in logs[::2]:
        append(plog, batch(3))
    lm.shutdown()
    points = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert points == {("t", p): 3 if p % 2 == 0 else 0 for p in range(40)}
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    again = manager([tmp_path])
    assert {p.partition: p.log_end_offset for p in again.all_logs()} == {p: 3 if p % 2 == 0 else 0 for p in range(40)}
