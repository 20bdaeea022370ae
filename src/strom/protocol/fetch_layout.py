"""The byte layout of a flexible Fetch request (v12+) and of an answer in which no partition has
anything to say, for answering a repeated sessionless Fetch without decoding or encoding it.

librdkafka never uses fetch sessions: every Fetch names every assigned partition, and it starts
each one a partition further along its list (fairness), so the same partitions come in a rotated
order, a topic's run cut in two where the list wraps. The bytes of one partition's entry do not
change while its fetch position does not. So a request is cut here into its fixed part (every field
before the topics and everything after them) and its topic entries, each a topic key (the name's or
id's bytes) and a run of partition entries of ``PARTITION_SIZE`` bytes each (no tagged fields); a run
is then found as a slice of the topic's entries as an earlier request listed them, taken
cyclically. An answer with no records and no error has partition entries of ``IDLE_ENTRY_SIZE``
bytes in the request's order, so the answer to a request made of known runs is the same slices of
the earlier answer's entries, put together by ``build_idle_answer``.

Only bytes are compared and copied here: the cost is per topic entry, not per partition.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from strom.protocol import fastwrite

FIRST_VERSION = 12  # the first flexible Fetch (v12) and every later one share this layout
TOPIC_ID_VERSION = 13
# partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
# partition_max_bytes, an empty tagged-field section
PARTITION_SIZE = 4 + 4 + 8 + 4 + 8 + 4 + 1
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset,
# aborted_transactions (null), preferred_read_replica, records (empty), an empty tagged-field section
IDLE_ENTRY_SIZE = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1
# throttle_time_ms, error_code, session_id: all zero in a sessionless answer without throttling
_ANSWER_HEAD = bytes(10)


_PARTITION = struct.Struct(">iiqiqiB")
assert _PARTITION.size == PARTITION_SIZE


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return fastwrite.uvarint(len(data) + 1) + data


class TopicRun(NamedTuple):
    key: bytes  # the topic's name (compact string, v12) or id (v13+), as encoded
    entries: bytes  # the partition entries, PARTITION_SIZE bytes each


class RequestLayout(NamedTuple):
    fixed: bytes  # every byte of the body before the topics' count and after the topics
    runs: list[TopicRun]


def _uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def parse_request(frame: bytes | bytearray | memoryview, start: int, version: int) -> RequestLayout | None:
    """The layout of a Fetch request body at ``frame[start:]``, or None when it is not one this
    module reads (an older version, a partition entry with tagged fields, a null array, bad bytes).
    Only the boundaries are read: the caller compares the pieces with those of a request it decoded."""
    if version < FIRST_VERSION:
        return None
    view = memoryview(frame)
    pos = start + (21 if version >= 15 else 25)  # v15 moved replica_id into a tagged field
    try:
        count, after = _uvarint(view, pos)
        if count == 0:
            return None
        head = bytes(view[start:pos])
        runs = []
        cursor = after
        for _ in range(count - 1):
            if version >= TOPIC_ID_VERSION:
                key_end = cursor + 16
            else:
                length, name_at = _uvarint(view, cursor)
                if length == 0:
                    return None
                key_end = name_at + length - 1
            n, entries_at = _uvarint(view, key_end)
            if n == 0:
                return None
            end = entries_at + (n - 1) * PARTITION_SIZE
            if end >= len(view) or view[end] != 0:  # the topic's tagged fields: none
                return None
            runs.append(TopicRun(bytes(view[cursor:key_end]), bytes(view[entries_at:end])))
            cursor = end + 1
        if cursor > len(view):
            return None
    except (ValueError, IndexError):
        return None
    return RequestLayout(head + b"|" + bytes(view[cursor:]), runs)


class _Topic:
    __slots__ = ("entries", "answers", "count")

    def __init__(self) -> None:
        self.entries = b""  # the request's partition entries, twice over (a rotation is one slice)
        self.answers = b""  # their answers, likewise
        self.count = 0


class IdleAnswers:
    """The request entries and idle answer entries of one answered request, by topic, to answer
    any request made of the same fixed part and of runs found in them (``answer``)."""

    __slots__ = ("fixed", "_topics")

    def __init__(self, fixed: bytes, topics: dict[bytes, _Topic]) -> None:
        self.fixed = fixed
        self._topics = topics

    @classmethod
    def learn(cls, layout: RequestLayout, decoded: Sequence[Any], body: bytes) -> IdleAnswers | None:
        """From a request's layout, its decoded topics (kio's FetchTopic) and the answer body
        encoded for it (every partition without records or error): None unless the layout's runs
        are those topics' partitions as encoded (checked here once per learnt request) and
        ``answer`` rebuilds that very body from them."""
        if len(decoded) != len(layout.runs):
            return None
        for t, run in zip(decoded, layout.runs, strict=True):
            topic_id = getattr(t, "topic_id", None)  # v13+
            key = topic_id.bytes if topic_id is not None else _compact_string(t.topic)
            if run.key != key or run.entries != b"".join(
                    _PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                                    p.log_start_offset, p.partition_max_bytes, 0) for p in t.partitions):
                return None
        pos = len(_ANSWER_HEAD)
        if body[:pos] != _ANSWER_HEAD:
            return None
        try:
            count, pos = _uvarint(body, pos)
        except ValueError:
            return None
        if count != len(layout.runs) + 1:
            return None
        topics: dict[bytes, _Topic] = {}
        for run in layout.runs:
            n = len(run.entries) // PARTITION_SIZE
            pos += len(run.key) + len(fastwrite.uvarint(n + 1))
            end = pos + n * IDLE_ENTRY_SIZE
            t = topics.get(run.key)
            if t is None:
                t = topics[run.key] = _Topic()
            t.entries += run.entries
            t.answers += body[pos:end]
            t.count += n
            pos = end + 1
        for t in topics.values():
            t.entries += t.entries
            t.answers += t.answers
        learnt = cls(layout.fixed, topics)
        return learnt if learnt.answer(layout) == body else None

    def answer(self, layout: RequestLayout) -> bytes | None:
        """The idle answer body to a request of this layout, or None when a run is not known."""
        if layout.fixed != self.fixed:
            return None
        out = [_ANSWER_HEAD, fastwrite.uvarint(len(layout.runs) + 1)]
        topics = self._topics
        for key, entries in layout.runs:
            t = topics.get(key)
            n = len(entries) // PARTITION_SIZE
            if t is None or n > t.count:
                return None
            at = t.entries.find(entries[:PARTITION_SIZE])
            while at >= 0 and at % PARTITION_SIZE:  # a match across entries' boundaries: look on
                at = t.entries.find(entries[:PARTITION_SIZE], at + 1)
            if at < 0 or at >= t.count * PARTITION_SIZE or t.entries[at:at + len(entries)] != entries:
                return None
            first = at // PARTITION_SIZE
            out += (key, fastwrite.uvarint(n + 1),
                    t.answers[first * IDLE_ENTRY_SIZE:(first + n) * IDLE_ENTRY_SIZE], b"\0")
        out.append(b"\0")  # the answer's tagged fields: none
        return b"".join(out)
