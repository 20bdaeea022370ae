"""ReplicaFetcher: one task per leader broker copying that leader's partitions (Kafka's
ReplicaFetcherThread).

Before fetching a partition after a leader change, the follower finds where its log and the
leader's diverge (KIP-101/KIP-279): it sends OffsetForLeaderEpoch with its latest epoch, and the
leader answers with the largest epoch it has at or below that one and where that epoch ends. The
follower cuts its log there (or where its own copy of that epoch ends, if sooner) and asks again
when the leader's epoch was not one it knows. Then it fetches from its log end with its replica id:
the batches arrive with offsets and epochs assigned and are written as they are (no per-record
work); the leader's high watermark comes back with them.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.fetch.v11 import request as fetch_req
from kio.schema.offset_for_leader_epoch.v3 import request as ofle_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from strom.cluster.client import BrokerConnection
from strom.protocol.errors import ErrorCode as E
from strom.records.batch import InvalidRecordBatch, iter_batches, whole_batches_end
from strom.replication.fetch_session import FetchSessionClient
from strom.replication.leader_append import group_commit
from strom.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

if TYPE_CHECKING:
    from strom.cluster.zk_layout import BrokerRegistration
    from strom.config import BrokerConfig
    from strom.replication.partition import Partition
    from strom.security.client import ClientSecurity

log = logging.getLogger("strom.replication")

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
# Right after a leader change the follower often asks before the new leader has applied the change
# itself (both act on the same ZooKeeper watch): these errors then clear within milliseconds, so for
# one replica.fetch.backoff.ms after the partition came to this fetcher it is retried after this long
# instead of that backoff (1 s by default), which the new leader's high watermark, and every acks=all
# producer, would otherwise wait for. Later the full backoff applies, as in Kafka.
_LEADER_NOT_READY = {E.not_leader_or_follower, E.unknown_leader_epoch}
_LEADER_NOT_READY_RETRY_S = 0.02
# A Fetch not answered within this long sits in the leader's long-poll (see ReplicaFetcher._ask_soon).
_WAITING_S = 0.02
# How long stop() waits for the fetcher task (a Fetch being answered takes at most
# replica.fetch.wait.max.ms once its cancellation was lost, see stop()).
_STOP_WAIT_S = 5.0
_RETRY_LATER = {E.not_leader_or_follower, E.fenced_leader_epoch, E.unknown_leader_epoch,
                E.unknown_topic_or_partition, E.kafka_storage_error}


@dataclass
class _Fetching:
    part: Partition
    epoch: int
    truncated: bool = False  # the divergence check after the leader change is done
    delayed_until: float = 0.0
    added_at: float = 0.0  # time.monotonic() when it came to this fetcher


class FetcherHost(Protocol):
    """What a fetcher needs of the broker it runs in (the replica manager provides it)."""

    @property
    def broker_id(self) -> int: ...
    @property
    def config(self) -> BrokerConfig: ...  # the current one: replica.fetch.* may change
    @property
    def inter_broker_security(self) -> ClientSecurity: ...
    def registration(self, broker_id: int) -> BrokerRegistration | None: ...
    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]: ...


class ReplicaFetcher:
    def __init__(self, manager: FetcherHost, leader_id: int, fetcher_id: int = 0) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id  # which of num.replica.fetchers for this leader
        self.partitions: dict[tuple[str, int], _Fetching] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None
        cfg = manager.config
        self.backoff_s = max(cfg.replica_fetch_backoff_ms, 10) / 1000
        self.not_ready_s = min(self.backoff_s, _LEADER_NOT_READY_RETRY_S)
        self.max_wait_ms = cfg.replica_fetch_wait_max_ms
        self.socket_timeout_s = cfg.replica_socket_timeout_ms / 1000
        self._conn: BrokerConnection | None = None
        # The partitions of the Fetch on the wire (None when none is), and when it was sent.
        self._in_flight: set[tuple[str, int]] | None = None
        self._request_sent_at = 0.0
        self._gave_up = False  # _ask_soon closed the connection under that Fetch
        self._wanted: set[tuple[str, int]] = set()  # to be asked for without waiting (see _ask_soon)
        self._stopping = False
        self._session = FetchSessionClient()  # KIP-227: incremental fetches name only what changed

    def start(self) -> None:
        self._task = self.manager.spawn(self._run())

    async def stop(self) -> None:
        # Not the cancel alone: on Python 3.11 asyncio.wait_for (under every request) drops a
        # cancellation that comes in the loop turn its read completes, and the fetcher then went on
        # for ever while the broker's shutdown waited for it. The loop also checks this flag, and
        # the wait is bounded.
        self._stopping = True
        self._changed.set()  # an idle fetcher wakes up to see it
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait((self._task,), timeout=_STOP_WAIT_S)
            if not done:
                log.warning("replica fetcher for broker %d did not stop within %.0f s", self.leader_id,
                            _STOP_WAIT_S)

    def add(self, part: Partition) -> None:
        self.partitions[part.key] = _Fetching(part, part.leader_epoch, added_at=time.monotonic())
        self._changed.set()
        self._want(part.key)

    def _want(self, key: tuple[str, int]) -> None:
        """``key`` is to be asked for now: it just came here, or its short retry is due."""
        self._wanted.add(key)
        self._ask_soon(key)

    def _ask_soon(self, key: tuple[str, int]) -> None:
        """A Fetch on the wire without ``key`` may sit in the leader's long-poll for up to
        replica.fetch.wait.max.ms, and right after a leader change so would the new leader's high
        watermark (acks=all). Once that Fetch has been out for _WAITING_S it is waiting, not moving
        data (the leader answers at once when it has some), so it is given up: its connection is
        closed, as its answer would come first, and the loop goes round again at once (first the
        OffsetForLeaderEpoch of a partition that just came). Looked at again when _WAITING_S is up;
        a Fetch sent without a wanted partition (it came during an OffsetForLeaderEpoch) calls this."""
        in_flight = self._in_flight
        if in_flight is None or key in in_flight or key not in self._wanted or self._conn is None:
            return
        loop = asyncio.get_running_loop()
        f = self.partitions.get(key)
        if f is None:
            self._wanted.discard(key)
            return
        if f.delayed_until > loop.time() + 0.005:
            return  # it cannot be asked for yet: a short retry calls _want again when due
        waited = loop.time() - self._request_sent_at
        if waited < _WAITING_S:
            loop.call_later(_WAITING_S - waited, self._ask_soon, key)
            return
        self._gave_up = True
        self._conn.close()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self._wanted.discard(key)

    # ---- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        conn: BrokerConnection | None = None
        while not self._stopping:
            if not self.partitions:
                # Idle: let the connection go (Kafka shuts idle fetchers down). Kept, it may be dead by
                # the time partitions come back (the leader restarted meanwhile), and its first request
                # would then fail and cost replica.fetch.backoff.ms while a new leader waits for us.
                if conn is not None:
                    conn.close()
                    conn = self._conn = None
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if conn is None:
                    conn = self._connection()
                    await conn.connect()
                    self._conn = conn
                if any(not f.truncated for f in self.partitions.values()):
                    await self._truncate(conn)
                if not await self._fetch(conn):
                    await asyncio.sleep(min(self.backoff_s, 0.1))
            except asyncio.CancelledError:
                if conn is not None:
                    conn.close()
                raise
            except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, ConnectionError, LookupError) as e:
                if conn is not None:
                    conn.close()
                conn = self._conn = None
                if self._gave_up:  # closed by _ask_soon: go round again at once, on a new connection
                    self._gave_up = False
                    continue
                log.debug("fetching from broker %d: %s", self.leader_id, e)
                await asyncio.sleep(self.backoff_s)
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader_id)
                if conn is not None:
                    conn.close()
                conn = None
                await asyncio.sleep(self.backoff_s)
        if conn is not None:
            conn.close()

    def _connection(self) -> BrokerConnection:
        manager = self.manager
        reg = manager.registration(self.leader_id)
        if reg is None:
            raise LookupError(f"broker {self.leader_id} is not registered")
        listener = manager.config.inter_broker_listener_name or ""
        endpoint = reg.address_for(listener)
        return BrokerConnection(endpoint[0], endpoint[1], f"strom-replica-{manager.broker_id}-{self.fetcher_id}",
                                self.socket_timeout_s, manager.inter_broker_security)

    def _error_backoff(self, f: _Fetching, error_code: int) -> float:
        if error_code in _LEADER_NOT_READY and time.monotonic() - f.added_at < self.backoff_s:
            # When the short wait is over it must not wait for a long-poll on the others as well.
            asyncio.get_running_loop().call_later(self.not_ready_s, self._want, f.part.key)
            return self.not_ready_s
        return self.backoff_s

    # ---- divergence (OffsetForLeaderEpoch) -------------------------------------------------------

    async def _truncate(self, conn: BrokerConnection) -> None:
        todo = [f for f in self.partitions.values() if not f.truncated]
        by_topic: dict[str, list[_Fetching]] = {}
        for f in todo:
            by_topic.setdefault(f.part.topic, []).append(f)
        body = ofle_req.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.manager.broker_id),
            topics=tuple(ofle_req.OffsetForLeaderTopic(
                topic=TopicName(t),
                partitions=tuple(ofle_req.OffsetForLeaderPartition(
                    partition=i32(f.part.partition), current_leader_epoch=i32(f.epoch),
                    leader_epoch=i32(f.part.log.leader_epoch_cache.latest_epoch)) for f in fs))
                for t, fs in by_topic.items()))
        response = await conn.request(23, OFFSET_FOR_LEADER_EPOCH_VERSION, body)
        for topic in response.topics:
            for r in topic.partitions:
                fetching = self.partitions.get((topic.topic, r.partition))
                if fetching is None or fetching.truncated:
                    continue
                f = fetching
                if r.error_code != E.none:
                    f.delayed_until = asyncio.get_running_loop().time() + self._error_backoff(f, r.error_code)
                    continue
                f.truncated = self._apply_divergence(f.part, r.leader_epoch, r.end_offset)

    def _apply_divergence(self, part: Partition, leader_epoch: int, end_offset: int) -> bool:
        """Kafka's getOffsetTruncationState; True once the log agrees with the leader's."""
        plog = part.log
        end = plog.log_end_offset
        if end_offset == UNDEFINED_EPOCH_OFFSET or leader_epoch == UNDEFINED_EPOCH:
            target, done = min(plog.high_watermark, end), True
        else:
            mine_epoch, mine_end = plog.leader_epoch_cache.end_offset_for(leader_epoch, end)
            if mine_epoch == UNDEFINED_EPOCH:
                target, done = min(end_offset, end), True
            elif mine_epoch != leader_epoch:
                target, done = min(mine_end, end), False  # ask again with an older epoch
            else:
                target, done = min(end_offset, mine_end, end), True
        if target < end:
            log.info("%s-%d: truncating from %d to %d to match leader %d", part.topic, part.partition, end, target,
                     self.leader_id)
            plog.truncate_to(target)
        return done

    # ---- fetching --------------------------------------------------------------------------------

    async def _fetch(self, conn: BrokerConnection) -> bool:
        """One Fetch; False when there was nothing to ask for."""
        now = asyncio.get_running_loop().time()
        ready = [f for f in self.partitions.values() if f.truncated and f.delayed_until <= now]
        if not ready:
            return False
        cfg = self.manager.config
        max_bytes = cfg.replica_fetch_max_bytes
        wanted = {f.part.key: (f.part.log.log_end_offset, f.part.log.log_start_offset, f.epoch, max_bytes)
                  for f in ready}
        session_id, epoch, named, forgotten = self._session.build(wanted)
        by_topic: dict[str, list[tuple[str, int]]] = {}
        for key in named:
            by_topic.setdefault(key[0], []).append(key)
        gone: dict[str, list[int]] = {}
        for t, p in forgotten:
            gone.setdefault(t, []).append(p)
        body = fetch_req.FetchRequest(
            replica_id=BrokerId(self.manager.broker_id),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=self.max_wait_ms)),
            min_bytes=i32(cfg.replica_fetch_min_bytes),
            max_bytes=i32(cfg.replica_fetch_response_max_bytes),
            isolation_level=i8(0),
            session_id=i32(session_id), session_epoch=i32(epoch),
            topics=tuple(fetch_req.FetchTopic(
                topic=TopicName(t),
                partitions=tuple(fetch_req.FetchPartition(
                    partition=i32(key[1]), current_leader_epoch=i32(wanted[key][2]),
                    fetch_offset=i64(wanted[key][0]), log_start_offset=i64(wanted[key][1]),
                    partition_max_bytes=i32(max_bytes)) for key in keys))
                for t, keys in by_topic.items()),
            forgotten_topics_data=tuple(fetch_req.ForgottenTopic(topic=TopicName(t), partitions=tuple(
                i32(p) for p in ps)) for t, ps in gone.items()),
            rack_id="")
        loop = asyncio.get_running_loop()
        self._in_flight = in_flight = {f.part.key for f in ready}
        self._request_sent_at = loop.time()
        self._gave_up = False
        if self._wanted:
            self._wanted -= in_flight
            for key in self._wanted:  # not ready yet (no OffsetForLeaderEpoch answer, or a short retry)
                loop.call_soon(self._ask_soon, key)
        try:
            response = await conn.request(1, FETCH_VERSION, body, self.socket_timeout_s + self.max_wait_ms / 1000)
        except BaseException:
            self._session.reset()  # the leader may or may not have taken that Fetch: start over
            raise
        finally:
            self._in_flight = None
        if not self._session.handle_response(response.error_code, response.session_id):
            if response.error_code not in (E.fetch_session_id_not_found, E.invalid_fetch_session_epoch):
                log.warning("fetch from leader %d failed with error %s", self.leader_id, response.error_code)
                await asyncio.sleep(self.backoff_s)
            return True  # a session error: the next Fetch, a full one, follows at once
        to_flush = []
        for topic in response.responses:
            for r in topic.partitions:
                fetching = self.partitions.get((topic.topic, r.partition_index))
                if fetching is None or fetching.epoch != fetching.part.leader_epoch:
                    continue
                f = fetching
                if self._handle_partition(f, r) and f.part.log.needs_flush():
                    to_flush.append(f.part.log)
        if to_flush:
            await group_commit(to_flush)
        return True

    def _handle_partition(self, f: _Fetching, r: Any) -> bool:
        """Apply one partition's fetch result; True when records were appended."""
        part = f.part
        plog = part.log
        if r.error_code == E.offset_out_of_range:
            if plog.log_end_offset < r.log_start_offset:
                log.info("%s-%d: log ends at %d, before the leader's start %d: starting over there",
                         part.topic, part.partition, plog.log_end_offset, r.log_start_offset)
                plog.truncate_fully_and_start_at(r.log_start_offset)
            else:
                f.truncated = False  # ahead of the leader: find the divergence again
            return False
        if r.error_code != E.none:
            if r.error_code not in _RETRY_LATER:
                log.warning("%s-%d: fetch from leader %d failed with error %s", part.topic, part.partition,
                            self.leader_id, r.error_code)
            f.delayed_until = asyncio.get_running_loop().time() + self._error_backoff(f, r.error_code)
            return False
        appended = False
        data = r.records
        if data:
            buf = bytearray(data)
            try:
                end = whole_batches_end(buf)
                headers = iter_batches(memoryview(buf)[:end]) if end else []
            except InvalidRecordBatch as e:
                log.warning("%s-%d: bad batch from leader %d: %s", part.topic, part.partition, self.leader_id, e)
                f.delayed_until = asyncio.get_running_loop().time() + self.backoff_s
                return False
            if headers:
                plog.append_as_follower(memoryview(buf)[:end], headers)
                appended = True
        if r.log_start_offset > plog.log_start_offset:
            plog.advance_log_start_offset(min(r.log_start_offset, plog.log_end_offset))
        plog.update_high_watermark(min(r.high_watermark, plog.log_end_offset))
        return appended

