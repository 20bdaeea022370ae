"""Segment file suffixes of the cleaner and retention, and finishing an interrupted swap at start.

Kafka's protocol, which a crash at any point leaves recoverable:

1. the cleaner writes ``<base>.log.cleaned`` (and ``.index.cleaned``, ``.timeindex.cleaned``, and
   ``.txnindex.cleaned`` when it kept ABORT markers) and fsyncs them;
2. it renames them to ``.swap`` (indexes first, the ``.log`` last: a ``.log.swap`` means the new
   segment is complete);
3. the replaced segments' files are renamed to ``.deleted``;
4. the ``.swap`` files lose their suffix, and the ``.deleted`` files are removed later.

At start (``complete_swaps``), ``.cleaned`` files are deleted (the cleaning is rolled back: the old
segments are still all there), and every ``<base>.log.swap`` is completed: the segments it replaces
(base offsets in [base, the swap's next offset)) are deleted and the swap becomes ``<base>.log``.
Its offset and time indexes are rebuilt from the log; its ``.txnindex.swap`` (the aborted transactions
the cleaner kept; renamed to .swap before the .log and back after it) becomes its ``.txnindex``, and
the replaced segments' ``.txnindex`` files go with them. As in Kafka (KAFKA-6264), a ``.swap`` at or above the lowest
``.cleaned`` base offset belongs to an unfinished operation and is deleted instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from strom.storage.atomic import fsync_dir
from strom.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
    iter_headers,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _base_of(name: str, suffix: str) -> int | None:
    """Base offset of ``<20 digits><suffix>``, else None."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _swap_next_offset(path: Path) -> int | None:
    """Offset after the last whole batch of a swap file (its base offset if it holds none)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        last = None
        for header in iter_headers(fd, 0, size):
            last = header
        return last.next_offset if last is not None else None
    finally:
        os.close(fd)


def complete_swaps(directory: Path) -> int:
    """Roll back cleanings that had not reached the swap, complete those that had. Returns the
    number of swaps completed."""
    names = [p.name for p in directory.iterdir()]
    cleaned_bases = [b for n in names if (b := _base_of(n, LOG_SUFFIX + CLEANED_SUFFIX)) is not None]
    min_cleaned = min(cleaned_bases, default=None)
    for n in names:
        if n.endswith(CLEANED_SUFFIX):
            (directory / n).unlink(missing_ok=True)
    swaps: list[int] = []
    txn_swaps: dict[int, Path] = {}
    for n in names:
        if not n.endswith(SWAP_SUFFIX):
            continue
        txn_base = _base_of(n, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
        if txn_base is not None and (min_cleaned is None or txn_base < min_cleaned):
            txn_swaps[txn_base] = directory / n  # goes in with its .log.swap (below), if there is one
            continue
        base = _base_of(n, LOG_SUFFIX + SWAP_SUFFIX)
        if base is None or (min_cleaned is not None and base >= min_cleaned):
            # Index swaps are rebuilt from the log; a swap above a .cleaned file is an unfinished one.
            (directory / n).unlink(missing_ok=True)
        else:
            swaps.append(base)
    for txn_base, path in txn_swaps.items():
        if txn_base not in swaps:
            # Its .log.swap already became the .log (the .txnindex goes out of .swap last).
            os.replace(path, directory / file_name(txn_base, TXN_INDEX_SUFFIX))
    if not swaps:
        return 0
    segment_bases = sorted(b for n in names if (b := _base_of(n, LOG_SUFFIX)) is not None)
    for base in sorted(swaps):
        swap = directory / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        next_offset = _swap_next_offset(swap)
        end = next_offset if next_offset is not None else base
        replaced = [b for b in segment_bases if base <= b < end or b == base]
        log.info("%s: completing the interrupted swap of segment %d (replaces %s)", directory, base, replaced)
        for b in replaced:
            for suffix in SEGMENT_SUFFIXES:
                if b == base and suffix == LOG_SUFFIX:
                    continue  # replaced atomically by the rename below
                (directory / file_name(b, suffix)).unlink(missing_ok=True)
        if base in txn_swaps:
            os.replace(txn_swaps[base], directory / file_name(base, TXN_INDEX_SUFFIX))
        os.replace(swap, directory / file_name(base, LOG_SUFFIX))
    fsync_dir(directory)
    return len(swaps)


def rename_segment_files(seg: LogSegment, suffix: str) -> None:
    """Rename a segment's three files to ``<name><suffix>`` and point the segment at the new names
    (so ``seg.delete()`` removes them). A missing file (an index never written) is skipped."""
    for path in (seg.log_path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path):
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, path.with_name(path.name + suffix))
    seg.log_path = seg.log_path.with_name(seg.log_path.name + suffix)
    seg.offset_index.path = seg.offset_index.path.with_name(seg.offset_index.path.name + suffix)
    seg.time_index.path = seg.time_index.path.with_name(seg.time_index.path.name + suffix)
    seg.txn_index.path = seg.txn_index.path.with_name(seg.txn_index.path.name + suffix)


def strip_suffix(path: Path, suffix: str) -> Path:
    """Rename ``<name><suffix>`` back to ``<name>`` (replacing any file there)."""
    assert path.name.endswith(suffix), path
    target = path.with_name(path.name[: -len(suffix)])
    os.replace(path, target)
    return target
