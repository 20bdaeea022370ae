"""Errors raised by the storage layer, named after Kafka's."""

from __future__ import annotations


class StorageError(Exception):
    """Base class for storage failures that the broker maps to an error code."""


class OffsetOutOfRange(StorageError):
    """A fetch or DeleteRecords offset outside [log start offset, log end offset]."""

    error = "offset_out_of_range"


class CorruptIndex(StorageError):
    """An index entry that does not point at the batch it claims; the index is rebuilt from the log."""


class InconsistentMetadata(StorageError):
    """A log directory's meta.properties belongs to another broker id or cluster."""
