"""Fetch sessions (KIP-227): the broker remembers what a fetcher asks for, so that its next fetches
list only what changed and are answered with only the partitions that have something to say.

A full fetch (session epoch 0) asks for a session: when the cache has room (or can evict one, as
Kafka's FetchSessionCache decides), the response carries a new session id and the session caches
every partition of the request with what the response told of it (high watermark, last stable
offset, log start offset). The fetcher then sends incremental fetches (epoch 1, 2, ...) naming only
partitions that are new or whose fetch position changed, and the topics it forgets; the broker
answers with the partitions that have records, a changed high watermark, last stable offset or log
start offset, an error, or that are new to the session. Epoch -1 closes the session (or asks for
none); a session id the cache no longer has is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH, and a fetch that uses topic ids on a session that used names (or the
other way round) FETCH_SESSION_TOPIC_ID_ERROR.

What makes an idle session cheap: every session keeps ``pending``, the partitions worth reading at
its next fetch (new or changed in a request, notified by the purgatory since they were last read:
an append, a high watermark, leadership or ISR change; or that had something to say last time, as
their records may still be there). The cache indexes sessions by partition and listens to the
purgatory, so a notification marks the partition in each session that holds it and wakes a fetch of
that session waiting in its long poll. An incremental fetch reads only ``pending``; a session of
10,000 idle partitions costs nothing per partition, per request or per wake-up.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.errors import ErrorCode as E

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# Kafka's min.incremental.fetch.session.eviction.ms (an internal config): a session unused this long
# may be evicted by any new one, and one older than this may be evicted by a larger one.
EVICTION_MS = 120_000

PartitionKey = tuple[str, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class CachedPartition:
    """One partition of a session: what the fetcher asked for last (with kio's FetchPartition
    attribute names, so the fetch handler reads it like a request's partition) and what the
    fetcher was last told."""

    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch",
                 "log_start_offset", "last_fetched_epoch", "high_watermark", "last_stable_offset",
                 "leader_log_start_offset")

    def __init__(self, topic: str, topic_id: uuid.UUID | None, p: Any) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = int(p.partition)
        self.high_watermark = -1  # never told: the first answer includes it
        self.last_stable_offset = -1
        self.leader_log_start_offset = -1
        self.update(p)

    def update(self, p: Any) -> None:
        self.fetch_offset = int(p.fetch_offset)
        self.partition_max_bytes = int(p.partition_max_bytes)
        self.current_leader_epoch = int(getattr(p, "current_leader_epoch", -1))
        self.log_start_offset = int(getattr(p, "log_start_offset", -1))
        self.last_fetched_epoch = int(getattr(p, "last_fetched_epoch", -1))

    @property
    def key(self) -> PartitionKey:
        return self.topic, self.partition

    def must_respond(self, entry: dict[str, Any]) -> bool:
        """Whether the answer ``entry`` for this partition goes in an incremental response (Kafka's
        CachedPartition.maybeUpdateResponseData); records what the fetcher is now told."""
        respond = bool(entry["records"]) or entry["error_code"] != E.none
        if entry["error_code"] != E.none:
            self.high_watermark = -1  # told again once the error is gone
        elif entry["high_watermark"] != self.high_watermark:
            self.high_watermark = entry["high_watermark"]
            respond = True
        if entry["last_stable_offset"] != self.last_stable_offset:
            self.last_stable_offset = entry["last_stable_offset"]
            respond = True
        if entry["log_start_offset"] != self.leader_log_start_offset:
            self.leader_log_start_offset = entry["log_start_offset"]
            respond = True
        return respond


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental fetch must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)
    # The partitions the next fetch reads (insertion-ordered, used as a set).
    pending: dict[PartitionKey, None] = field(default_factory=dict)
    alive: bool = True
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def holds(self, key: PartitionKey) -> bool:
        return key in self.partitions

    def mark(self, key: PartitionKey) -> None:
        self.pending[key] = None
        if self._waiters:
            self.wake()

    def wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait(self, timeout: float) -> None:
        """Until a partition is marked or ``timeout`` passes."""
        if self.pending or not self.alive:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        handle = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)

    def take_pending(self) -> list[CachedPartition]:
        """The partitions to read now (pending is then empty)."""
        parts = self.partitions
        out = [cp for k in self.pending if (cp := parts.get(k)) is not None]
        self.pending.clear()
        return out


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class FetchSessionCache:
    """Sessions by id, with Kafka's limits and eviction (FetchSessionCache), and the index from
    partition to sessions that the purgatory's notifications go through (``on_change``)."""

    def __init__(self, max_entries: Callable[[], int], clock: Callable[[], int],
                 eviction_ms: int = EVICTION_MS) -> None:
        """``max_entries`` reads max.incremental.fetch.session.cache.slots; ``clock`` is the time
        in milliseconds."""
        self._max_entries = max_entries
        self._clock = clock
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self._by_partition: dict[PartitionKey, set[FetchSession]] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def now(self) -> int:
        return self._clock()

    def on_change(self, key: PartitionKey) -> None:
        """The purgatory notified ``key``: each session holding it reads it at its next fetch."""
        holders = self._by_partition.get(key)
        if holders:
            for s in holders:
                s.mark(key)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        s = self.sessions.pop(session_id, None)
        if s is not None:
            s.alive = False
            for key in s.partitions:
                self._unindex(s, key)
            s.pending.clear()
            s.wake()  # a fetch of it waiting in its long poll answers now
        return s

    def maybe_create(self, privileged: bool, uses_topic_ids: bool, partitions: Iterable[CachedPartition]
                     ) -> FetchSession | None:
        """A new session holding ``partitions`` when there is room or one can be evicted."""
        parts = list(partitions)
        now = self._clock()
        if len(self.sessions) >= self._max_entries() and not self._try_evict(privileged, len(parts), now):
            return None
        if self._max_entries() <= 0:
            return None
        sid = 0
        while sid == INVALID_SESSION_ID or sid in self.sessions:
            sid = random.randint(1, 0x7FFFFFFE)
        s = FetchSession(sid, privileged, uses_topic_ids, now, now)
        for cp in parts:
            self.add_partition(s, cp)
        self.sessions[sid] = s
        self.touch(s, now)
        return s

    def add_partition(self, s: FetchSession, cp: CachedPartition) -> None:
        key = cp.key
        s.partitions[key] = cp
        self._by_partition.setdefault(key, set()).add(s)

    def remove_partition(self, s: FetchSession, key: PartitionKey) -> None:
        if s.partitions.pop(key, None) is not None:
            self._unindex(s, key)
        s.pending.pop(key, None)

    def _unindex(self, s: FetchSession, key: PartitionKey) -> None:
        holders = self._by_partition.get(key)
        if holders is not None:
            holders.discard(s)
            if not holders:
                del self._by_partition[key]

    def touch(self, s: FetchSession, now: int) -> None:
        s.last_used_ms = now
        old = now - s.created_ms > self.eviction_ms
        s.evictable_by_privileged = not s.privileged or old
        s.evictable_by_all = old

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's rule: the least recently used session if unused for longer than the eviction
        time; else the least valuable (unprivileged before privileged, then fewer partitions) of
        those the newcomer may evict (any unprivileged one for a follower; otherwise only sessions
        older than the eviction time), if it is worth no more than the newcomer."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size, 0) < (victim.privileged, len(victim.partitions), victim.id):
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True


class SessionTopic:
    """A topic of an incremental fetch as the fetch handler reads it: the session's partitions."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: list[Any]) -> None:
        self.partitions = partitions


# (topic name or None when its id is unknown, topic id (v13+), topic with .partitions)
ReadTopic = tuple[str | None, uuid.UUID | None, Any]


@dataclass
class FetchContext:
    """How one Fetch request is served (Kafka's FetchContext): ``kind`` is "sessionless" (epoch
    -1, no session wanted, or sessions off), "full" (epoch 0: a session is created with the
    answer), "incremental" (``session``'s pending partitions are read) or "error" (``error``)."""

    kind: str
    session: FetchSession | None = None
    error: int = E.none
    privileged: bool = False
    uses_topic_ids: bool = False

    @property
    def incremental(self) -> bool:
        return self.kind == "incremental"


def new_context(cache: FetchSessionCache, request: Any, version: int, privileged: bool,
                topic_name: Callable[[uuid.UUID], str | None], topic_id_version: int) -> FetchContext:
    """Kafka's FetchManager.newContext: which session (if any) serves this request. For an
    incremental request the session is updated here (added and changed partitions, forgotten
    topics) and its epoch moves on."""
    session_id = int(getattr(request, "session_id", 0))
    epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
    uses_ids = version >= topic_id_version
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full fetch closes the session it names
        if epoch == FINAL_EPOCH or cache._max_entries() <= 0:
            return FetchContext("sessionless", privileged=privileged, uses_topic_ids=uses_ids)
        return FetchContext("full", privileged=privileged, uses_topic_ids=uses_ids)
    s = cache.get(session_id)
    if s is None:
        return FetchContext("error", error=E.fetch_session_id_not_found)
    if s.epoch != epoch:
        return FetchContext("error", error=E.invalid_fetch_session_epoch)
    if s.uses_topic_ids != uses_ids:
        return FetchContext("error", error=E.fetch_session_topic_id_error)
    for t in request.topics:
        tid = t.topic_id if uses_ids else None
        name = topic_name(tid) if tid is not None else t.topic
        if name is None:
            continue  # answered with UNKNOWN_TOPIC_ID (unresolved_topics), not cached
        for p in t.partitions:
            key = (name, int(p.partition))
            cp = s.partitions.get(key)
            if cp is not None:
                cp.update(p)
            else:
                cache.add_partition(s, CachedPartition(name, tid, p))
            s.pending[key] = None
    for ft in getattr(request, "forgotten_topics_data", None) or ():
        name = topic_name(ft.topic_id) if uses_ids else ft.topic
        if name is None:
            continue
        for pi in ft.partitions:
            cache.remove_partition(s, (name, int(pi)))
    if not s.partitions:
        cache.remove(s.id)
        return FetchContext("sessionless", privileged=privileged, uses_topic_ids=uses_ids)
    s.epoch = next_epoch(s.epoch)
    cache.touch(s, cache.now())
    return FetchContext("incremental", session=s, privileged=privileged, uses_topic_ids=uses_ids)


def unresolved_topics(request: Any, uses_ids: bool, topic_name: Callable[[uuid.UUID], str | None]
                      ) -> list[ReadTopic]:
    """The topics of an incremental request whose ids are unknown: answered with an error, never
    cached."""
    if not uses_ids:
        return []
    return [(None, t.topic_id, t) for t in request.topics if t.partitions and topic_name(t.topic_id) is None]


def session_topics(parts: Iterable[CachedPartition]) -> list[ReadTopic]:
    """Partitions grouped by topic, in order of first appearance, as the fetch handler reads them."""
    by_topic: dict[str, tuple[uuid.UUID | None, list[CachedPartition]]] = {}
    for cp in parts:
        entry = by_topic.get(cp.topic)
        if entry is None:
            by_topic[cp.topic] = (cp.topic_id, [cp])
        else:
            entry[1].append(cp)
    out: list[ReadTopic] = [(name, tid, SessionTopic(ps)) for name, (tid, ps) in by_topic.items()]
    return out


def finish(cache: FetchSessionCache, fctx: FetchContext, topics: list[ReadTopic],
           responses: list[dict[str, Any]], skipped: Iterable[PartitionKey] = ()
           ) -> tuple[list[dict[str, Any]], int]:
    """(the response's topics, its session id) for the partitions read (``topics``, answered by
    ``responses`` in the same order): a full fetch creates its session here, with what it tells;
    an incremental one keeps only the partitions that must be told, and those that may have more
    to say (records, an error, or left out for want of room: ``skipped``) stay pending."""
    if fctx.kind == "sessionless":
        return responses, INVALID_SESSION_ID
    if fctx.kind == "full":
        parts = []
        keep = []
        for (name, tid, t), topic in zip(topics, responses, strict=True):
            if name is None:
                continue
            for p, entry in zip(t.partitions, topic["partitions"], strict=True):
                cp = CachedPartition(name, tid, p)
                cp.must_respond(entry)
                parts.append(cp)
                if entry["records"] or entry["error_code"] != E.none:
                    keep.append(cp.key)
        s = cache.maybe_create(fctx.privileged, fctx.uses_topic_ids, parts)
        if s is None:
            return responses, INVALID_SESSION_ID
        for key in (*keep, *skipped):
            s.pending[key] = None
        return responses, s.id
    s = fctx.session
    assert s is not None
    out = []
    for (name, _, t), topic in zip(topics, responses, strict=True):
        if name is None:
            out.append(topic)  # an unknown topic id: told every time
            continue
        told = []
        for cp, entry in zip(t.partitions, topic["partitions"], strict=True):
            if not isinstance(cp, CachedPartition) or s.partitions.get(cp.key) is not cp:
                continue  # forgotten meanwhile
            if cp.must_respond(entry):
                told.append(entry)
                if entry["records"] or entry["error_code"] != E.none:
                    s.pending[cp.key] = None
        if told:
            out.append({**topic, "partitions": told})
    for key in skipped:
        if key in s.partitions:
            s.pending[key] = None
    return out, s.id
