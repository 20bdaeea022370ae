"""TransactionIndex: a segment's aborted transactions (Kafka's ``.txnindex`` file).

One 34-byte entry per transaction whose ABORT marker lies in the segment: version int16 (0),
producer id int64, first offset int64, last offset int64 (the marker), last stable offset int64
(the partition's LSO once that marker was written). A read_committed Fetch asks the segments from
the fetch offset on for the aborted transactions that overlap what it returns; the client drops
their records. Entries are kept in memory too: aborts are rare and the list is small.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from strom.storage.atomic import read_file

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        data = read_file(self.path)
        if data is None:
            return
        whole = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is dropped (and rebuilt by recovery)
        for pos in range(0, whole, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != _VERSION:
                break
            self.entries.append(AbortedTxn(*fields))

    def known_absent(self) -> None:
        """The file is known not to exist (a directory listing said so): nothing to read."""
        self._loaded = True

    def append(self, txn: AbortedTxn) -> None:
        self._load()
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            return  # already indexed (a replay over data the index had)
        self.entries.append(txn)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(_VERSION, *txn))
        finally:
            os.close(fd)

    def replace_entries(self, entries: list[AbortedTxn]) -> None:
        """Set the entries in memory only (a cleaned segment's index, written by the cleaner)."""
        self._loaded = True
        self.entries = list(entries)

    def to_bytes(self) -> bytes:
        self._load()
        return b"".join(_ENTRY.pack(_VERSION, *t) for t in self.entries)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), and whether no later segment
        can hold more (an entry whose LSO reaches the bound: Kafka's isComplete)."""
        self._load()
        found = [t for t in self.entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound]
        complete = any(t.last_stable_offset >= upper_bound for t in self.entries)
        return found, complete

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset`` (the log was cut there, or is replayed
        from there)."""
        self._load()
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if keep:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(_ENTRY.pack(_VERSION, *t) for t in keep))
            os.replace(tmp, self.path)
        else:
            self.path.unlink(missing_ok=True)
