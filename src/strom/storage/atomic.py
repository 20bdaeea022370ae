"""Atomic file writes: write a temporary file, fsync it, rename it over the old one, fsync the
directory, so a crash leaves either the old file or the new one, never a torn mix. Storage writes its
checkpoints this way, and cluster/ and security/ their metadata, ACL, quota and credential files."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_fdatasync = getattr(os, "fdatasync", None)  # not on macOS


def sync_data(fd: int) -> None:
    """Make a file's data durable: fdatasync(2) where there is one, else fsync. It writes the data
    and the metadata needed to read it back (the size of a file that grew), but not a new
    modification time: one journal write less per file than fsync, for the same data on disk."""
    if _fdatasync is not None:
        _fdatasync(fd)
    else:
        os.fsync(fd)


def write_all(fd: int, data: memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` (pwrite may write less than asked)."""
    while data:
        n = os.pwrite(fd, data, position)
        data, position = data[n:], position + n


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def has_syncfs() -> bool:
    return getattr(_libc, "syncfs", None) is not None


def sync_filesystem(directory: Path) -> bool:
    """syncfs(2) the file system holding ``directory``. On Linux it returns once every file's
    written data and metadata there are on disk: the guarantee of an fsync of each file and
    directory (syncfs(2) and sync(2), NOTES), at the cost of one call when thousands of files
    changed. False where there is no syncfs: the caller fsyncs file by file."""
    syncfs = getattr(_libc, "syncfs", None)
    if syncfs is None:
        return False
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs {directory}: {os.strerror(errno)}")
    finally:
        os.close(fd)
    return True


def fsync_path(path: Path) -> None:
    """Make a file's data durable by name (``sync_data``); a file deleted meanwhile has nothing
    left to make durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        sync_data(fd)
    finally:
        os.close(fd)


def read_file(path: str | Path) -> bytes | None:
    """A small file's bytes, None if it is missing: open, fstat, read, close (for the thousands of
    checkpoint and index files of a start, cheaper than ``Path.read_bytes``)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size) if size else b""
        while len(data) < size:  # a short read: rare, but allowed
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, fsync: bool = True, fsync_directory: bool = True,
                 mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``. Without fsync the rename is still atomic, not yet durable.
    ``fsync_directory=False``: the caller fsyncs the directory itself (once for many files).
    ``mode`` is given to the temporary file as it is created, before any byte is in it, and the
    rename keeps it: a private file (no rights for group or others, e.g. 0o600) is never readable by
    others, not even for a moment. For a private file, a temporary file left by a crash is removed
    rather than reused: an existing file keeps its own mode, and whoever has it open keeps reading."""
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if not mode & 0o077:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    fd = os.open(tmp, flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            sync_data(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync and fsync_directory:
        fsync_dir(path.parent)
