"""Hot-path counters of one broker: plain ints in dicts, exported at scrape time by strom.admin.

Nothing here calls prometheus_client: a request costs a few dict and int operations. State that can
be read off the broker when asked (log sizes, offsets, connections, lag) is not counted here at all;
the admin layer's collector computes it at scrape time.
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any

# Upper bounds (seconds) of the request latency histogram; the last bucket is +Inf.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

PRODUCE_KEY = 0
FETCH_KEY = 1

_BATCH_LENGTH = struct.Struct(">i")  # at byte 8 of a batch
_RECORDS_COUNT = struct.Struct(">i")  # at byte 57 of a v2 batch
_HEADER_SIZE = 61
_LOG_OVERHEAD = 12


class RequestStats:
    """Count, total seconds and histogram buckets of one API's requests."""

    __slots__ = ("count", "seconds", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)


class TopicStats:
    """Bytes and records appended to (in) and sent from (out) one topic."""

    __slots__ = ("bytes_in", "records_in", "bytes_out", "records_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.records_in = 0
        self.bytes_out = 0
        self.records_out = 0


def count_records(data: bytes | bytearray | memoryview) -> int:
    """Sum of the records_count header fields of the whole v2 batches in ``data`` (no record decoding).

    A fetch may end inside a batch; that partial batch is not counted (the client drops it)."""
    total = 0
    pos = 0
    end = len(data)
    while pos + _HEADER_SIZE <= end:
        (length,) = _BATCH_LENGTH.unpack_from(data, pos + 8)
        nxt = pos + _LOG_OVERHEAD + length
        if length <= 0 or nxt > end:
            break
        (n,) = _RECORDS_COUNT.unpack_from(data, pos + 57)
        total += n
        pos = nxt
    return total


class BrokerMetrics:
    """Counters bumped on the request path; read (never reset) by the admin collector."""

    def __init__(self) -> None:
        self.start_time = time.time()
        self.requests: dict[int, RequestStats] = {}
        self.topics: dict[str, TopicStats] = {}
        # (api key, error code) -> responses (partition-level for Produce and Fetch) with that error
        self.errors: dict[tuple[int, int], int] = {}
        # Sessionless Fetch responses sent as encoded for an earlier identical request (nothing changed)
        self.fetch_answers_reused = 0

    clock = staticmethod(time.perf_counter)

    def request_done(self, api_key: int, started: float) -> None:
        """One request of ``api_key`` whose handler ran from ``started`` (``clock()``) until now."""
        elapsed = time.perf_counter() - started
        stats = self.requests.get(api_key)
        if stats is None:
            stats = self.requests[api_key] = RequestStats()
        stats.count += 1
        stats.seconds += elapsed
        stats.buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def produced(self, topic: str, nbytes: int, headers: Sequence[Any]) -> None:
        """Batches appended to ``topic``: ``headers`` are their BatchHeaders (records_count is read)."""
        stats = self._topic(topic)
        stats.bytes_in += nbytes
        stats.records_in += sum(h.records_count for h in headers)

    def errors_in(self, api_key: int, partitions: Iterable[dict[str, Any]]) -> None:
        """Count the partition responses of a request that carry an error code."""
        errors = self.errors
        for p in partitions:
            code = p["error_code"]
            if code:
                key = (api_key, int(code))
                errors[key] = errors.get(key, 0) + 1

    def fetched(self, topics: Sequence[tuple[Any, ...]], responses: Sequence[dict[str, Any]]) -> None:
        """A Fetch response about to be sent: ``topics`` are (name, ...) tuples in response order."""
        errors = self.errors
        for t, resp in zip(topics, responses, strict=False):
            name = t[0]
            for p in resp["partitions"]:
                code = p["error_code"]
                if code:
                    key = (FETCH_KEY, int(code))
                    errors[key] = errors.get(key, 0) + 1
                    continue
                data = p["records"]
                if data and name is not None:
                    stats = self._topic(name)
                    stats.bytes_out += len(data)
                    stats.records_out += count_records(data)

    def forget_topics(self, keep: Iterable[str]) -> None:
        """Drop the counters of topics that no longer exist (called at scrape time)."""
        alive = set(keep)
        for name in [n for n in self.topics if n not in alive]:
            del self.topics[name]
