"""Kafka's small text files: offset checkpoints, partition.metadata, meta.properties.

All writes are atomic (storage/atomic.py: write .tmp, fsync, rename, fsync the directory) so a crash leaves either the
old file or the new one, never a torn mix.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from strom.storage.atomic import read_file, write_atomic

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0


def format_entries(lines: list[str]) -> bytes:
    """Kafka's CheckpointFile text: version line, count line, one line per entry."""
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def parse_entries(text: str, fields: int) -> list[list[str]]:
    """Inverse of format_entries; raises ValueError on anything malformed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError("bad checkpoint version line")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:]]
    if count != len(entries) or any(len(e) != fields for e in entries):
        raise ValueError("checkpoint entry count or shape does not match")
    return entries


class OffsetCheckpointFile:
    """``recovery-point-offset-checkpoint`` and friends: "topic partition offset" per line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
        write_atomic(self.path, format_entries(lines))

    def read(self) -> dict[tuple[str, int], int]:
        """Missing file: empty. Malformed file: empty too (logged), which only costs a longer recovery."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            return {(t, int(p)): int(o) for t, p, o in parse_entries(text, 3)}
        except ValueError as exc:
            log.warning("ignoring malformed checkpoint %s: %s", self.path, exc)
            return {}


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def topic_id_from_str(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    """``partition.metadata``: "version: 0" and "topic_id: <base64>" lines."""

    FILE_NAME = "partition.metadata"

    def __init__(self, directory: Path) -> None:
        self.path = directory / self.FILE_NAME

    def write(self, topic_id: uuid.UUID, *, fsync: bool = True, fsync_directory: bool = True) -> None:
        """``fsync=False``: the caller makes it durable (a sync of the whole file system)."""
        write_atomic(
            self.path,
            f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n".encode(),
            fsync=fsync,
            fsync_directory=fsync_directory,
        )

    def read(self) -> uuid.UUID | None:
        data = read_file(self.path)
        if data is None:
            return None
        text = data.decode(errors="replace")  # a garbled file is reported below as malformed
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        try:
            if fields.get("version") != "0":
                raise ValueError(f"unsupported version {fields.get('version')!r}")
            return topic_id_from_str(fields["topic_id"])
        except (KeyError, ValueError) as exc:
            log.warning("ignoring malformed %s: %s", self.path, exc)
            return None


def read_properties(path: Path) -> dict[str, str] | None:
    """A Java .properties file as written by Kafka (``key=value``, ``#`` comments); None if missing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    header = f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
    body = "".join(f"{k}={v}\n" for k, v in props.items())
    write_atomic(path, (header + body).encode())
