"""LogManager: every partition log in the broker's log directories (Kafka's LogManager).

Per log directory it keeps Kafka's files: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``, ``meta.properties`` and the
``.kafka_cleanshutdown`` marker that lets the next start skip re-validating old segments.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from strom.storage.checkpoint import (
    OffsetCheckpointFile,
    PartitionMetadataFile,
    fsync_dir,
    read_properties,
    write_atomic,
    write_properties,
)
from strom.storage.errors import InconsistentMetadata
from strom.storage.log import LogConfig, PartitionLog, wall_clock_ms
from strom.storage.segment import LogSegment

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


def parse_topic_partition(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` -> (topic, partition); None for anything else (-future, -stray, ...)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's logDeleteDirName: ``<topic>-<partition>.<uuid hex>-delete``, at most 255 bytes."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        now_ms: Callable[[], int] = wall_clock_ms,
        *,
        broker_id: int = 0,
        cluster_id: str | None = None,
        topic_config: Callable[[str], LogConfig | None] | None = None,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._now_ms = now_ms
        self._topic_config = topic_config
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._checkpoint_lock = threading.Lock()  # the timed checkpoint and shutdown may overlap
        # Read at startup for replication; on one broker the high watermark follows the log end.
        self.high_watermark_checkpoints: dict[TopicPartition, int] = {}
        # With defer_deletions (the broker sets it), segments that retention, DeleteRecords or the
        # cleaner remove are renamed to .deleted at once and closed and unlinked by
        # delete_due_files, off the event loop, file.delete.delay.ms later (Kafka's async delete).
        self.defer_deletions = False
        self._pending_deletions: list[tuple[float, list[LogSegment]]] = []
        self._pending_lock = threading.Lock()

    def config_for(self, topic: str) -> LogConfig:
        override = self._topic_config(topic) if self._topic_config is not None else None
        return override if override is not None else self.default_config

    # ---- startup and shutdown --------------------------------------------------------------

    def startup(self) -> None:
        """Open every partition directory, recovering after an unclean stop, and remove
        directories left over from topic deletion."""
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        self._check_meta_properties()
        for directory in self.log_dirs:
            self._load_dir(directory)

    def _load_dir(self, directory: Path) -> None:
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).read()
        log_starts = OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).read()
        self.high_watermark_checkpoints.update(
            OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).read()
        )
        log.info("loading logs from %s (%s shutdown)", directory, "clean" if clean else "unclean")
        for child in sorted(directory.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)
                continue
            tp = parse_topic_partition(child.name)
            if tp is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", child)
                continue
            if tp in self._logs:
                raise InconsistentMetadata(
                    f"duplicate log directories for {tp[0]}-{tp[1]}: {self._logs[tp].directory} and {child}"
                )
            self._logs[tp] = PartitionLog.open(
                child,
                tp[0],
                tp[1],
                self.config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                clean_shutdown=clean,
                now_ms=self._now_ms,
            )
            self._attach(self._logs[tp])
        if clean:
            marker.unlink()
            fsync_dir(directory)

    def _check_meta_properties(self) -> None:
        missing = []
        for directory in self.log_dirs:
            path = directory / META_PROPERTIES
            props = read_properties(path)
            if props is None:
                missing.append(path)
                continue
            broker_id = props.get("broker.id", props.get("node.id"))
            if broker_id is not None and int(broker_id) != self.broker_id:
                raise InconsistentMetadata(
                    f"{path}: broker.id {broker_id} does not match this broker's {self.broker_id}"
                )
            found = props.get("cluster.id")
            if found and self.cluster_id and found != self.cluster_id:
                raise InconsistentMetadata(f"{path}: cluster.id {found} does not match {self.cluster_id}")
            self.cluster_id = self.cluster_id or found
        if self.cluster_id is None:
            self.cluster_id = new_cluster_id()
        for path in missing:
            write_properties(
                path, {"version": "0", "broker.id": str(self.broker_id), "cluster.id": self.cluster_id}
            )

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean shutdown markers."""
        for plog in self._logs.values():
            plog.flush()
            plog.close()
        self.delete_due_files(force=True)
        self.checkpoint()
        for directory in self.log_dirs:
            write_atomic(
                directory / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": -1}).encode()
            )
        self._logs.clear()

    # ---- logs ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def create_log(
        self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created (with ``partition.metadata``) if it does not exist yet."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            known = self.topic_id_of_dir(existing.directory)
            if known is not None and known != topic_id:
                raise InconsistentMetadata(
                    f"{topic}-{partition} exists with topic id {known}, not {topic_id}"
                )
            return existing
        parent = self._next_log_dir()
        directory = parent / f"{topic}-{partition}"
        directory.mkdir()
        PartitionMetadataFile(directory).write(topic_id)
        plog = PartitionLog.open(
            directory, topic, partition, config or self.config_for(topic), now_ms=self._now_ms
        )
        fsync_dir(parent)
        self._logs[(topic, partition)] = plog
        self._attach(plog)
        return plog

    # ---- deferred file deletion ------------------------------------------------------------

    def _attach(self, plog: PartitionLog) -> None:
        if self.defer_deletions:
            plog.deletion_sink = lambda segments: self._defer(plog, segments)

    def _defer(self, plog: PartitionLog, segments: list[LogSegment]) -> None:
        due = time.monotonic() + plog.config.file_delete_delay_ms / 1000
        with self._pending_lock:
            self._pending_deletions.append((due, segments))

    def delete_due_files(self, *, force: bool = False) -> int:
        """Close and unlink the .deleted segment files whose delay has passed (all with ``force``).
        Blocking: call it from a thread. Returns the number of segments removed."""
        now = time.monotonic()
        with self._pending_lock:
            due = [segs for t, segs in self._pending_deletions if force or t <= now]
            self._pending_deletions = [(t, segs) for t, segs in self._pending_deletions if not (force or t <= now)]
        count = 0
        for segments in due:
            for seg in segments:
                seg.delete()
                count += 1
        return count

    def _next_log_dir(self) -> Path:
        """Kafka's choice: the directory holding the fewest partitions."""
        counts = {d: 0 for d in self.log_dirs}
        for plog in self._logs.values():
            parent = plog.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    @staticmethod
    def topic_id_of_dir(directory: Path) -> uuid.UUID | None:
        return PartitionMetadataFile(directory).read()

    def topic_id(self, topic: str) -> uuid.UUID | None:
        for (t, _), plog in self._logs.items():
            if t == topic:
                return self.topic_id_of_dir(plog.directory)
        return None

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Topic config changed (AlterConfigs): applies to the next append of each partition."""
        for (t, _), plog in self._logs.items():
            if t == topic:
                plog.config = config

    def schedule_delete(self, topic: str) -> list[Path]:
        """Close the topic's logs and rename their directories to ``...-delete``; the caller
        removes the returned paths off the event loop with ``remove_dirs``."""
        renamed = []
        for tp in sorted(tp for tp in self._logs if tp[0] == topic):
            plog = self._logs.pop(tp)
            plog.close_handlers()
            target = plog.directory.parent / delete_dir_name(*tp)
            os.rename(plog.directory, target)
            fsync_dir(target.parent)
            renamed.append(target)
        return renamed

    @staticmethod
    def remove_dirs(paths: list[Path]) -> None:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def cleanup_logs(self) -> int:
        """Retention pass over every log (the broker schedules it); returns segments deleted."""
        return sum(plog.delete_old_segments() for plog in list(self._logs.values()))

    # ---- checkpoints -----------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the three offset checkpoints of every log directory atomically. Safe to call
        from a thread: it only reads the logs' offsets."""
        by_dir: dict[Path, list[tuple[TopicPartition, PartitionLog]]] = {d: [] for d in self.log_dirs}
        for tp, plog in list(self._logs.items()):
            by_dir.setdefault(plog.directory.parent, []).append((tp, plog))
        with self._checkpoint_lock:
            for directory, logs in by_dir.items():
                self._write_checkpoints(directory, logs)

    @staticmethod
    def _write_checkpoints(directory: Path, logs: list[tuple[TopicPartition, PartitionLog]]) -> None:
        checkpoints = {
            RECOVERY_POINT_CHECKPOINT: {tp: plog.recovery_point for tp, plog in logs},
            LOG_START_OFFSET_CHECKPOINT: {tp: plog.log_start_offset for tp, plog in logs},
            REPLICATION_OFFSET_CHECKPOINT: {tp: plog.high_watermark for tp, plog in logs},
        }
        for name, offsets in checkpoints.items():
            OffsetCheckpointFile(directory / name).write(offsets)
