"""Fetch (1): serve stored batch bytes as they are, with long-poll through the purgatory.

The response holds whole batches read from the segment files; nothing is decoded. When less than
min_bytes is available the request waits for a produce to one of its partitions (or max_wait).

A fetch that names a replica id (a follower's) is served as one only on the partition's leader, and
only for a broker that is one of the partition's replicas (with an authorizer, it also needs
CLUSTER_ACTION): a follower fetch reads up to the log end, past the high watermark, moves the
high watermark and the ISR, and no client quota applies to it. Anyone else who names a replica id
gets Kafka's answer for it (Partition.followerReplicaOrThrow) and nothing is read or recorded.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from strom.broker import fetch_sessions as sessions
from strom.broker.context import ENCODED_BODY, QUOTA_EXEMPT
from strom.protocol import fetch_layout, splice, wire
from strom.protocol.errors import ErrorCode as E
from strom.protocol.splice import BlobSplicer
from strom.records.batch import BATCH_LENGTH, LAST_OFFSET_DELTA, LOG_OVERHEAD
from strom.security.acl import AclOperation, ResourceType
from strom.storage.log import OffsetOutOfRange

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.replication.purgatory import Purgatory

API_KEY = 1
MIN_VERSION = 4
# v17 (a replica's directory id, KIP-853) and v18 (the fetcher's high watermark, KIP-1166) add request
# fields used between KRaft voters; on a topic partition a broker serves them as v16.
MAX_VERSION = 18

TOPIC_ID_VERSION = 13
READ_COMMITTED = 1
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")


def _resolve_topics(broker: Broker, request: Any, version: int) -> list[tuple[str | None, uuid.UUID | None, Any]]:
    out = []
    for t in request.topics:
        if version >= TOPIC_ID_VERSION:
            info = broker.metadata.topic_by_id(t.topic_id)
            out.append((info.name if info else None, t.topic_id, t))
        else:
            out.append((t.topic, None, t))
    return out


def _read_all(broker: Broker, topics: list[tuple[str | None, uuid.UUID | None, Any]], max_bytes: int,
              version: int, replica_id: int = -1, read_committed: bool = False,
              skipped: list[tuple[str, int]] | None = None,
              session: sessions.FetchSession | None = None) -> tuple[list[dict[str, Any]], int, bool, bool]:
    """One pass over the requested partitions: (response topics, bytes found, whether the response
    is complete at once: an error, or data left out for want of room under ``max_bytes``, and
    whether any partition was served as a follower's). Partitions a session must read again at its
    next fetch are added to ``skipped``: those not read for want of room, and those of a follower
    out of their ISR (it rejoins only on a fetch that reads them)."""
    replica_manager = broker.replica_manager
    remaining = max_bytes
    total = 0
    complete = followed = False
    responses = []
    for name, topic_id, t in topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition,
                "error_code": 0,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            max_offset = None  # consumers read below the high watermark
            if name is None:
                plog = None
                entry["error_code"] = E.unknown_topic_id if version >= TOPIC_ID_VERSION else E.unknown_topic_or_partition
            else:
                part, entry["error_code"] = replica_manager.leader_partition(
                    name, p.partition, getattr(p, "current_leader_epoch", -1))
                plog = part.log if part is not None else None
                if part is not None and replica_id >= 0:
                    if replica_id == part.broker_id or replica_id not in part.replicas:
                        # Not a follower of this partition: nothing is read, no follower state kept.
                        plog, entry["error_code"] = None, _not_a_replica(p)
                    elif p.fetch_offset <= part.log.log_end_offset:
                        # A follower: its fetch offset is its log end; it copies up to ours.
                        replica_manager.follower_fetched(part, replica_id, p.fetch_offset,
                                                         getattr(p, "log_start_offset", -1), session)
                        if skipped is not None and replica_id not in part.state.isr:
                            skipped.append((name, p.partition))  # looked at again until it rejoins
                        max_offset = part.log.log_end_offset
                        followed = True
            if plog is None:
                complete = True
            else:
                entry["high_watermark"] = plog.high_watermark
                lso = entry["last_stable_offset"] = plog.last_stable_offset
                entry["log_start_offset"] = plog.log_start_offset
                if read_committed and max_offset is None:
                    max_offset = lso  # READ_COMMITTED: nothing at or past an open transaction
                limit = min(p.partition_max_bytes, remaining)
                try:
                    # KIP-74: the first partition with data returns at least one whole batch.
                    data = plog.read(p.fetch_offset, max(limit, 0), max_offset=max_offset, min_one_batch=total == 0) \
                        if limit > 0 or total == 0 else b""
                    if skipped is not None and not data and limit <= 0 and total > 0:
                        skipped.append((plog.topic, p.partition))
                except OffsetOutOfRange:
                    entry["error_code"] = E.offset_out_of_range
                    complete = True
                    data = b""
                entry["records"] = data
                if read_committed and data:
                    # The client drops the records of these (producer, from first offset to marker).
                    entry["aborted_transactions"] = [
                        {"producer_id": t.producer_id, "first_offset": t.first_offset}
                        for t in plog.aborted_transactions(p.fetch_offset, lso)]
                if not complete and limit == remaining and len(data) < max(limit, 1):
                    # The response's room ran out here: more to send counts as min_bytes met (as
                    # Kafka counts the bytes there are, not those sent), else a min_bytes that only
                    # a cut-off batch would have reached waits out max_wait for nothing.
                    visible_end = plog.high_watermark if max_offset is None else min(max_offset,
                                                                                      plog.log_end_offset)
                    complete = p.fetch_offset < visible_end if not data else _next_offset(data) < visible_end
                total += len(data)
                remaining -= len(data)
            parts.append(entry)
        key = "topic_id" if version >= TOPIC_ID_VERSION else "topic"
        responses.append({key: topic_id if version >= TOPIC_ID_VERSION else name, "partitions": parts})
    return responses, total, complete, followed


def _next_offset(data: bytes | memoryview) -> int:
    """The offset after the last of the whole batches in ``data`` (a walk over batch lengths)."""
    pos = last = 0
    while pos + LOG_OVERHEAD <= len(data):
        last = pos
        pos += LOG_OVERHEAD + _I32.unpack_from(data, pos + BATCH_LENGTH)[0]
    return int(_I64.unpack_from(data, last)[0] + _I32.unpack_from(data, last + LAST_OFFSET_DELTA)[0] + 1)


def _not_a_replica(p: Any) -> int:
    """Kafka's answer to a fetch naming a replica id that is not one of the partition's followers
    (Partition.followerReplicaOrThrow): UNKNOWN_LEADER_EPOCH when the request carries the leader
    epoch, else NOT_LEADER_OR_FOLLOWER."""
    return E.unknown_leader_epoch if getattr(p, "current_leader_epoch", -1) >= 0 else E.not_leader_or_follower


def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Answers at once when data (or an error) is there; otherwise returns the long-poll to await."""
    version = ctx.api_version
    fctx = sessions.new_context(broker.fetch_sessions, request, version, _replica_id(request) >= 0,
                                lambda tid: _topic_name(broker, tid), TOPIC_ID_VERSION)
    if fctx.kind == "error":
        return {"throttle_time": 0, "error_code": fctx.error, "session_id": sessions.INVALID_SESSION_ID,
                "responses": [], splice.RESULT_KEY: BlobSplicer(), QUOTA_EXEMPT: False}
    remember: _Learn | None = None
    memo = ctx.memo
    layout = memo.pop(_LAYOUT, None) if memo is not None else None
    if memo is not None and layout is not None and layout[0] == ctx.correlation_id and fctx.kind == "sessionless" \
            and int(getattr(request, "session_id", 0)) == sessions.INVALID_SESSION_ID \
            and _replica_id(request) < 0 and not broker.quotas.active:
        remember = (memo, layout[1], request)
    if fctx.incremental:
        assert fctx.session is not None
        topics = [*sessions.session_topics(fctx.session.take_pending()),
                  *sessions.unresolved_topics(request, fctx.uses_topic_ids, lambda tid: _topic_name(broker, tid))]
    else:
        topics = _resolve_topics(broker, request, version)
    cap = broker.quotas.fetch_cap(ctx) if broker.quotas.active and _replica_id(request) < 0 else None
    if broker.acls.enabled:
        allowed, refused = _authorize(broker, ctx, topics, _replica_id(request), version)
        if refused:
            if fctx.session is not None:  # asked for again at the session's next fetch, and refused again
                kept = {name for name, _, _ in allowed}
                for name, _, t in topics:
                    if name is not None and name not in kept:
                        for cp in t.partitions:
                            fctx.session.pending[(name, cp.partition)] = None
            topics = allowed
            # An error answers at once, as in Kafka: no long-poll on the rest.
            return _with_refused(_serve(broker, request, topics, version, fctx, at_once=True, cap=cap), refused)
    return _serve(broker, request, topics, version, fctx, cap=cap, remember=remember)


def _topic_name(broker: Broker, topic_id: uuid.UUID) -> str | None:
    info = broker.metadata.topic_by_id(topic_id)
    return info.name if info else None


def _serve(broker: Broker, request: Any, topics: list[tuple[str | None, uuid.UUID | None, Any]],
           version: int, fctx: sessions.FetchContext, at_once: bool = False,
           cap: int | None = None, remember: _Learn | None = None
           ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    # The response is bounded by the request's max_bytes and the broker's fetch.max.bytes, as in
    # Kafka (KafkaApis.handleFetchRequest), and per partition by its partition_max_bytes; the first
    # batch of the first partition with data still goes out whole, whatever its size (KIP-74).
    max_bytes = min(getattr(request, "max_bytes", 0x7FFFFFFF), broker.config.fetch_max_bytes)
    if cap is not None:  # a consumer byte-rate quota: one window of it
        max_bytes = min(max_bytes, cap)
    min_bytes = min(request.min_bytes, max_bytes)  # never wait for more than may be sent
    replica_id = _replica_id(request)
    committed = replica_id < 0 and getattr(request, "isolation_level", 0) == READ_COMMITTED
    skipped: list[tuple[str, int]] = []
    since = broker.purgatory.seq
    first = _read_all(broker, topics, max_bytes, version, replica_id, committed, skipped, fctx.session)
    responses, total, complete, followed = first
    waitable = fctx.incremental or any(name is not None for name, _, _ in topics)
    if total >= min_bytes or complete or at_once or not waitable or request.max_wait.total_seconds() <= 0:
        idle = _Remember(*remember, topics, since) if remember is not None and waitable \
            and not at_once and total == 0 and not complete else None
        return _result(broker, fctx, topics, responses, replica_id, followed, skipped, idle)
    args = (broker, request, fctx, topics, first, skipped, max_bytes, min_bytes, version, replica_id, committed)
    if fctx.incremental:
        return _long_poll_session(*args)
    return _long_poll(*args, since, remember=remember)


def _authorize(broker: Broker, ctx: RequestContext, topics: list[tuple[str | None, uuid.UUID | None, Any]],
               replica_id: int, version: int) -> tuple[list[tuple[str | None, uuid.UUID | None, Any]],
                                                       list[dict[str, Any]]]:
    """(the topics to serve, the refused ones' response entries): a consumer needs READ on each
    topic, a follower CLUSTER_ACTION on the cluster (Kafka's checks)."""
    acls = broker.acls
    denied: set[str | None]
    if replica_id >= 0:
        denied = {name for name, _, _ in topics} if not acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION) \
            else set()
    else:
        denied = set(acls.denied(ctx, AclOperation.READ, ResourceType.TOPIC,
                                 (n for n, _, _ in topics if n is not None)))
    if not denied:
        return topics, []
    key = "topic_id" if version >= TOPIC_ID_VERSION else "topic"
    refused = [{key: topic_id if version >= TOPIC_ID_VERSION else name, "partitions": [
        {"partition_index": p.partition, "error_code": E.topic_authorization_failed, "high_watermark": -1,
         "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
         "preferred_read_replica": -1, "records": b""} for p in t.partitions]}
        for name, topic_id, t in topics if name in denied]
    return [x for x in topics if x[0] not in denied], refused


def _with_refused(answer: dict[str, Any] | Awaitable[dict[str, Any]],
                  refused: list[dict[str, Any]]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    def add(response: dict[str, Any]) -> dict[str, Any]:
        for topic in refused:
            for entry in topic["partitions"]:
                entry["records"] = response[splice.RESULT_KEY].hold(b"")
        response["responses"] = [*response["responses"], *refused]
        return response

    if isinstance(answer, dict):
        return add(answer)

    async def later() -> dict[str, Any]:
        return add(await answer)

    return later()


def _replica_id(request: Any) -> int:
    """The fetching follower's broker id (v15+ carries it in replica_state); -1 for consumers."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


async def _long_poll(broker: Broker, request: Any, fctx: sessions.FetchContext,
                     topics: list[tuple[str | None, uuid.UUID | None, Any]],
                     first: tuple[list[dict[str, Any]], int, bool, bool], skipped: list[tuple[str, int]],
                     max_bytes: int, min_bytes: int, version: int, replica_id: int, read_committed: bool,
                     since: int, deadline: float | None = None, remember: _Learn | None = None
                     ) -> dict[str, Any]:
    """Wait for produces to the requested partitions (purgatory) until min_bytes are there or
    max_wait ends.

    The wait is by topic and learns which partitions were notified (from ``since``, the purgatory's
    count when handle() read, so nothing notified in between is missed); a wake-up reads only the
    requested partitions among them to see whether the response is now due. The response itself is
    one pass over every partition, done again only if one of them changed since the first.
    ``deadline`` (loop time) when the wait began earlier; ``remember``: where and how a response
    with nothing to send is kept for the next requests (``_IdleAnswer``).
    """
    loop = asyncio.get_running_loop()
    if deadline is None:
        deadline = loop.time() + request.max_wait.total_seconds()
    responses, total, complete, followed = first
    read_seq = since  # the purgatory's count when ``responses`` were read
    purgatory = broker.purgatory
    names = {name for name, _, _ in topics if name is not None}
    wanted: dict[tuple[str, int], tuple[uuid.UUID | None, Any]] | None = None
    sizes: dict[tuple[str, int], int] = {}
    changed_any = False
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        changed = await purgatory.wait_topics(names, remaining, since)
        since = purgatory.seq
        if changed is None:  # too much happened to tell what: look at everything again
            skipped = []
            read_seq = since
            responses, total, complete, followed = _read_all(broker, topics, max_bytes, version, replica_id,
                                                             read_committed, skipped)
            changed_any = False
            sizes.clear()
            wanted = None
            if total >= min_bytes or complete:
                break
            continue
        if not changed:
            continue
        if wanted is None:
            wanted = {}
            for (name, tid, t), topic in zip(topics, responses, strict=True):
                if name is None:
                    continue
                for p, entry in zip(t.partitions, topic["partitions"], strict=True):
                    wanted[(name, p.partition)] = (tid, p)
                    if entry["records"]:
                        sizes[(name, p.partition)] = len(entry["records"])
        subset: dict[str, tuple[uuid.UUID | None, list[Any]]] = {}
        for key in changed:
            hit = wanted.get(key)
            if hit is not None:
                subset.setdefault(key[0], (hit[0], []))[1].append(hit[1])
        if not subset:
            continue
        changed_any = True
        look: list[tuple[str | None, uuid.UUID | None, Any]] = [
            (name, tid, sessions.SessionTopic(ps)) for name, (tid, ps) in subset.items()]
        part_responses, _, now_complete, _ = _read_all(broker, look, max_bytes, version, replica_id, read_committed)
        for (name, _, t), topic in zip(look, part_responses, strict=True):
            for p, entry in zip(t.partitions, topic["partitions"], strict=True):
                sizes[(name or "", p.partition)] = len(entry["records"])
        if sum(sizes.values()) >= min_bytes or now_complete:
            break
    if changed_any:
        skipped = []
        read_seq = purgatory.seq
        responses, total, complete, followed = _read_all(broker, topics, max_bytes, version, replica_id,
                                                         read_committed, skipped)
    idle = _Remember(*remember, topics, read_seq) if remember is not None and total == 0 \
        and not complete else None
    return _result(broker, fctx, topics, responses, replica_id, followed, skipped, idle)


async def _long_poll_session(broker: Broker, request: Any, fctx: sessions.FetchContext,
                             topics: list[tuple[str | None, uuid.UUID | None, Any]],
                             first: tuple[list[dict[str, Any]], int, bool, bool], skipped: list[tuple[str, int]],
                             max_bytes: int, min_bytes: int, version: int, replica_id: int,
                             read_committed: bool) -> dict[str, Any]:
    """An incremental fetch waits on its session: a notification of one of the session's
    partitions marks it pending and wakes the wait, and only the partitions read so far plus those
    marked are read again."""
    session = fctx.session
    assert session is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    responses, total, complete, followed = first
    read: dict[tuple[str, int], Any] = {}
    for name, _, t in topics:
        if name is not None:
            for cp in t.partitions:
                read[(name, cp.partition)] = cp
    done = False
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or not session.alive:
                break
            await session.wait(remaining)
            new = session.take_pending()
            if not new:
                continue
            for cp in new:
                read[cp.key] = cp
            topics = [*sessions.session_topics(read.values()), *(x for x in topics if x[0] is None)]
            skipped = []
            responses, total, complete, followed = _read_all(broker, topics, max_bytes, version, replica_id,
                                                             read_committed, skipped, session)
            if total >= min_bytes or complete:
                break
        done = True
    finally:
        if not done:  # not answered: what was taken is read again at the session's next fetch
            for key in read:
                session.pending[key] = None
    return _result(broker, fctx, topics, responses, replica_id, followed, skipped)


def _follower_session(broker: Broker, session: sessions.FetchSession, replica_id: int) -> None:
    """A follower's new session: its later fetches cover every partition in it (Partition.last_caught_up_ms)."""
    partitions = broker.replica_manager.partitions
    for key in session.partitions:
        part = partitions.get(key)
        f = part.followers.get(replica_id) if part is not None else None
        if f is not None:
            f.session = session


def _result(broker: Broker, fctx: sessions.FetchContext, topics: list[tuple[str | None, uuid.UUID | None, Any]],
            responses: list[dict[str, Any]], replica_id: int = -1, followed: bool = False,
            skipped: list[tuple[str, int]] | None = None, idle: _Remember | None = None) -> dict[str, Any]:
    if replica_id < 0:  # bytes out to consumers; followers' copies are replication, not consumption
        broker.metrics.fetched(topics, responses)
    responses, session_id = sessions.finish(broker.fetch_sessions, fctx, topics, responses, skipped or ())
    if replica_id >= 0 and fctx.kind == "full" and session_id != sessions.INVALID_SESSION_ID:
        _follower_session(broker, broker.fetch_sessions.sessions[session_id], replica_id)
    if idle is not None and fctx.kind == "sessionless":
        # Nothing to send: the encoded answer is kept for the next identical request (no blobs: no records).
        result = {"throttle_time": 0, "error_code": 0, "session_id": session_id, "responses": responses}
        version = idle.layout_version
        body = wire.encode_response_dict(API_KEY, version, 0, result)[wire.response_header_size(API_KEY, version):]
        answers = fetch_layout.IdleAnswers.learn(idle.layout, idle.request.topics, body)
        if answers is not None:
            idle.memo[_IDLE] = _IdleAnswer(idle.request, version, idle.topics, idle.seq, answers)
        return {ENCODED_BODY: body}
    # The record batches go to the socket beside the encoded response, not through the encoder.
    blobs = BlobSplicer()
    for topic in responses:
        for entry in topic["partitions"]:
            entry["records"] = blobs.hold(entry["records"])
    return {"throttle_time": 0, "error_code": 0, "session_id": session_id, "responses": responses,
            splice.RESULT_KEY: blobs, QUOTA_EXEMPT: followed}


# The keys of a connection's _IdleAnswer and of the layout handle_frame read, in its memo.
_IDLE = "fetch.idle"
_LAYOUT = "fetch.layout"
_Learn = tuple[dict[str, Any], tuple[int, fetch_layout.RequestLayout], Any]  # memo, (version, layout), request


class _Remember(NamedTuple):
    """A sessionless consumer fetch's answer with nothing to send, to be kept in ``memo``:
    ``topics`` were read when the purgatory's count was ``seq``."""

    memo: dict[str, Any]
    versioned_layout: tuple[int, fetch_layout.RequestLayout]
    request: Any
    topics: list[tuple[str | None, uuid.UUID | None, Any]]
    seq: int

    @property
    def layout_version(self) -> int:
        return self.versioned_layout[0]

    @property
    def layout(self) -> fetch_layout.RequestLayout:
        return self.versioned_layout[1]


class _IdleAnswer:
    """The last answer on a connection to a sessionless consumer Fetch (librdkafka's: every
    assigned partition at every request, a partition further along its list each time) that had
    nothing to send: no records, no error, every topic known. While none of its partitions is
    notified by the purgatory (an append, a high watermark, log start or last stable offset move, a
    leadership or ISR change, a deleted topic), a request made of the same partitions at the same
    positions, in any rotation, gets the same answer in its order: ``answers`` puts it together
    from the bytes encoded for the first (protocol/fetch_layout.py), without decoding the request
    or a pass over its partitions.
    """

    __slots__ = ("version", "topics", "names", "seq", "answers", "max_wait", "min_bytes", "max_bytes", "_keys")

    def __init__(self, request: Any, version: int, topics: list[tuple[str | None, uuid.UUID | None, Any]],
                 seq: int, answers: fetch_layout.IdleAnswers) -> None:
        self.version = version
        self.topics = topics
        self.names = {name for name, _, _ in topics if name is not None}
        self.seq = seq  # the purgatory's count up to which the answer is known to hold
        self.answers = answers
        # The request's own fields, the same in every request ``answers`` recognises.
        self.max_wait = request.max_wait.total_seconds()
        self.min_bytes = int(request.min_bytes)
        self.max_bytes = int(getattr(request, "max_bytes", 0x7FFFFFFF))
        self._keys: set[tuple[str, int]] | None = None

    @property
    def keys(self) -> set[tuple[str, int]]:
        """The partitions asked for (built the first time a notification of their topics needs it)."""
        if self._keys is None:
            self._keys = {(name, p.partition) for name, _, t in self.topics if name is not None
                          for p in t.partitions}
        return self._keys

    def unchanged(self, changed: Iterable[tuple[str, int]]) -> bool:
        keys = self.keys
        return not any(k in keys for k in changed)

    def still_holds(self, purgatory: Purgatory) -> bool:
        """Whether no partition asked for was notified since ``seq`` (which then moves on): a look
        per topic, and one per partition notified in these topics meanwhile."""
        seq = purgatory.seq
        if seq != self.seq:
            if purgatory.topics_changed_since(self.names, self.seq):
                missed = purgatory.changed_since(self.seq)
                if missed is None or not self.unchanged(missed):
                    return False
            self.seq = seq
        return True


def handle_frame(broker: Broker, ctx: RequestContext, frame: bytes | bytearray,
                 start: int) -> dict[str, Any] | Awaitable[dict[str, Any]] | None:
    """Before the request is decoded: a sessionless Fetch that repeats (in any rotation) the one
    this connection's idle answer was made for, while that answer holds, is served from it; None
    lets ``handle`` serve the request (it learns a new idle answer from it if it can)."""
    memo = ctx.memo
    version = ctx.api_version
    if memo is None or version < fetch_layout.FIRST_VERSION or broker.quotas.active:
        return None
    layout = fetch_layout.parse_request(frame, start, version)
    if layout is None:
        return None
    memo[_LAYOUT] = (ctx.correlation_id, (version, layout))
    idle: _IdleAnswer | None = memo.get(_IDLE)
    if idle is None or idle.version != version:
        return None
    body = idle.answers.answer(layout)
    if body is None:
        return None
    if not idle.still_holds(broker.purgatory):
        del memo[_IDLE]
        return None
    if broker.acls.enabled and _authorize(broker, ctx, idle.topics, -1, version)[1]:
        return None  # refused now: answered the long way, with the refusals
    del memo[_LAYOUT]
    max_bytes = min(idle.max_bytes, broker.config.fetch_max_bytes)
    min_bytes = min(idle.min_bytes, max_bytes)
    if min_bytes <= 0 or idle.max_wait <= 0:
        broker.metrics.fetch_answers_reused += 1
        return {ENCODED_BODY: body}
    return _idle_poll(broker, ctx, frame, idle, body, max_bytes, min_bytes, (version, layout))


async def _idle_poll(broker: Broker, ctx: RequestContext, frame: bytes | bytearray, idle: _IdleAnswer, body: bytes,
                     max_bytes: int, min_bytes: int, layout: tuple[int, fetch_layout.RequestLayout]
                     ) -> dict[str, Any]:
    """The long poll of a request answered by ``idle`` so far: ``body`` at the end if none of its
    partitions is notified meanwhile; if one is, the request is decoded and served as ``_serve``
    would from there (one read of every partition, and the long poll for the time left)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + idle.max_wait
    purgatory = broker.purgatory
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            broker.metrics.fetch_answers_reused += 1
            return {ENCODED_BODY: body}
        changed = await purgatory.wait_topics(idle.names, remaining, idle.seq)
        if changed is None or not idle.unchanged(changed):
            break
        idle.seq = purgatory.seq  # what was notified meanwhile is none of this request's partitions
    memo = ctx.memo
    assert memo is not None
    if memo.get(_IDLE) is idle:
        del memo[_IDLE]
    version = ctx.api_version
    _, request = wire.decode_request(wire.read_prefix(frame), frame)  # its bytes were checked: it decodes
    fctx = sessions.new_context(broker.fetch_sessions, request, version, False,
                                lambda tid: _topic_name(broker, tid), TOPIC_ID_VERSION)  # sessionless
    topics = _resolve_topics(broker, request, version)
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    skipped: list[tuple[str, int]] = []
    since = purgatory.seq
    first = _read_all(broker, topics, max_bytes, version, -1, committed, skipped)
    responses, total, complete, followed = first
    learn = (memo, layout, request)
    if total >= min_bytes or complete or loop.time() >= deadline:
        remember = _Remember(*learn, topics, since) if total == 0 and not complete else None
        return _result(broker, fctx, topics, responses, -1, followed, skipped, remember)
    return await _long_poll(broker, request, fctx, topics, first, skipped, max_bytes, min_bytes, version, -1,
                            committed, since, deadline=deadline, remember=learn)
