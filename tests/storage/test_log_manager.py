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
