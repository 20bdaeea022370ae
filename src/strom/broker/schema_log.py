"""The broker's side of the schema registry's ``SchemaLog`` (strom.registry.store): the one
partition of ``_schemas``. The broker leading it appends as its leader (acks=all, through the replica
manager like a coordinator's writes) and reads its own log up to the high watermark; any other broker
reads the leader's committed records over the Kafka protocol (a consumer's Fetch on the inter-broker
listener, as a follower fetcher connects), so it sees every write the leader acknowledged, whether or
not it holds a replica. Built by the registry's listener (strom.admin.registry) from the few parts of
the broker it uses."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v11 import request as fetch_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from strom.clock import now_ms
from strom.cluster.client import BrokerConnection
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec
from strom.replication.leader_append import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.topics import TopicManager
    from strom.cluster.metadata import MetadataStore
    from strom.replication.partition import Partition
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.registry")

SCHEMAS_TOPIC = "_schemas"
_READ_BYTES = 1 << 20
_FETCH_VERSION = 11
_REQUEST_TIMEOUT_S = 10.0
_SETTLE_POLL_S = 0.01

Rows = list[tuple[int, bytes | None, bytes | None]]


class SchemaLogError(Exception):
    def __init__(self, message: str, not_leader: bool = False) -> None:
        super().__init__(message)
        self.not_leader = not_leader


def _rows(data: bytes, offset: int) -> tuple[Rows, int]:
    """The records of the whole batches in ``data`` at or past ``offset``, and the offset after the
    last batch (``offset`` when there was none)."""
    out: Rows = []
    next_offset = offset
    for header in rb.iter_batches(data[:rb.whole_batches_end(data)]):
        if header.next_offset <= offset:
            continue
        next_offset = header.next_offset
        if header.is_control:
            continue
        out += [(r.offset, r.key, r.value) for r in codec.iter_records(data, header) if r.offset >= offset]
    return out, next_offset


class BrokerSchemaLog:
    def __init__(self, replicas: ReplicaManager, log_manager: LogManager, topics: TopicManager,
                 metadata: MetadataStore, serving: asyncio.Event, live_brokers: Callable[[], int],
                 error: Callable[..., Exception] = SchemaLogError) -> None:
        self._replicas = replicas
        self._log_manager = log_manager
        self._topics = topics
        self._metadata = metadata
        self._serving = serving
        self._live_brokers = live_brokers
        self._error = error  # the registry's SchemaLogError: raised as the registry knows it
        self._conn: tuple[int, BrokerConnection] | None = None  # to the leader, for reads

    async def ready(self) -> None:
        await self._serving.wait()

    def _ensure_topic(self) -> None:
        """``_schemas`` made at the first write, as Confluent's registry makes it: compacted, one
        partition, replication factor min(3, live brokers)."""
        if self._metadata.get_topic(SCHEMAS_TOPIC) is not None:
            return
        rf = max(1, min(3, self._live_brokers()))
        try:
            self._topics.create(SCHEMAS_TOPIC, 1, rf, {"cleanup.policy": "compact"})
        except Exception as e:
            if self._metadata.get_topic(SCHEMAS_TOPIC) is None:
                raise self._error(f"could not create {SCHEMAS_TOPIC}: {e}") from e

    def _led(self) -> Partition | None:
        part, _ = self._replicas.leader_partition(SCHEMAS_TOPIC, 0)
        return part

    def _leader(self) -> int:
        """The leader of ``_schemas``-0 as this broker's metadata has it (-1: none, or no topic)."""
        state = self._replicas.store.state(SCHEMAS_TOPIC, 0)
        return state.leader if state is not None else -1

    async def writer(self) -> tuple[str, ...] | None:
        """None when this broker leads ``_schemas`` (made first if it does not exist); else the
        registry URLs of the broker that leads it (none while no leader is known, or when the leader
        serves no registry)."""
        self._ensure_topic()
        if self._led() is not None:
            return None
        leader = self._leader()
        reg = self._replicas.registration(leader) if leader >= 0 and leader != self._replicas.broker_id else None
        return reg.schema_registry if reg is not None else ()

    async def append(self, records: Sequence[tuple[bytes, bytes | None]], timeout_s: float) -> None:
        self._ensure_topic()
        buf = bytearray(codec.build_batch(list(records), timestamp_ms=now_ms()))
        outcome = self._replicas.append_records(-1, timeout_s, [(SCHEMAS_TOPIC, 0, buf)], AppendOrigin.COORDINATOR)
        results = outcome if isinstance(outcome, list) else await outcome
        error = E(results[0]["error_code"])
        if error is not E.none:
            raise self._error(f"{SCHEMAS_TOPIC}-0: {error.name}",
                              not_leader=error in (E.not_leader_or_follower, E.unknown_topic_or_partition))

    async def read(self, from_offset: int, settle_s: float = 0.0, to_log_end: bool = False) -> tuple[Rows, int]:
        """The committed records from ``from_offset``: from this broker's log when it leads
        ``_schemas``, else from the leader's. On the leader, with ``settle_s``, first waiting that
        long at most until its high watermark covers every record written under earlier leader
        epochs (a new leader's high watermark reaches its log end only once its followers have
        fetched, and what an earlier leader acknowledged may lie above it until then), or with
        ``to_log_end`` every record of its log (a write decides on all of them: one whose append
        timed out may still be committed)."""
        if self._metadata.get_topic(SCHEMAS_TOPIC) is None:
            return [], from_offset
        part = self._led()
        if part is not None:
            if settle_s > 0:
                await self._settle(part, settle_s, part.log.log_end_offset if to_log_end else part.epoch_start_offset)
            return await self._read_local(from_offset)
        leader = self._leader()
        if leader < 0 or leader == self._replicas.broker_id:
            raise self._error(f"{SCHEMAS_TOPIC}-0 has no leader now")
        try:
            return await self._read_remote(leader, from_offset)
        except SchemaLogError as e:
            self._drop_connection()
            raise self._error(str(e), not_leader=e.not_leader) from None
        except Exception as e:  # the connection: refused, closed, timed out
            self._drop_connection()
            raise self._error(f"could not read {SCHEMAS_TOPIC}-0 from its leader, broker {leader}: {e!r}") from e

    async def _settle(self, part: Partition, timeout_s: float, target: int) -> None:
        plog = part.log
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while plog.high_watermark < target and part.is_leader:
            if loop.time() > deadline:
                raise self._error(f"{SCHEMAS_TOPIC}-0: the high watermark {plog.high_watermark} did not reach "
                                  f"{target} within {timeout_s:.0f} s")
            await asyncio.sleep(_SETTLE_POLL_S)

    async def _read_local(self, from_offset: int) -> tuple[Rows, int]:
        plog = self._log_manager.get_log(SCHEMAS_TOPIC, 0)
        if plog is None:
            return [], from_offset
        offset = max(from_offset, plog.log_start_offset)
        end = plog.high_watermark
        out: Rows = []
        loop = asyncio.get_running_loop()
        max_bytes = _READ_BYTES
        while offset < end:
            data = await loop.run_in_executor(None, functools.partial(plog.read, offset, max_bytes, max_offset=end))
            rows, next_offset = _rows(bytes(data) if data else b"", offset)
            out += rows
            if next_offset == offset:
                if len(data or b"") < max_bytes:
                    break
                max_bytes *= 2
                continue
            offset = next_offset
        return out, max(offset, from_offset)

    # ---- reading the leader's log over the Kafka protocol ------------------------------------------

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def _connection(self, leader: int) -> BrokerConnection:
        if self._conn is not None and self._conn[0] == leader:
            return self._conn[1]
        self._drop_connection()
        reg = self._replicas.registration(leader)
        if reg is None:
            raise SchemaLogError(f"broker {leader}, the leader of {SCHEMAS_TOPIC}-0, is not registered")
        host, port = reg.address_for(self._replicas.config.inter_broker_listener_name or "")
        conn = BrokerConnection(host, port, f"strom-registry-{self._replicas.broker_id}", _REQUEST_TIMEOUT_S,
                                self._replicas.inter_broker_security)
        await conn.connect()
        self._conn = (leader, conn)
        return conn

    async def _read_remote(self, leader: int, from_offset: int) -> tuple[Rows, int]:
        conn = await self._connection(leader)
        out: Rows = []
        offset = from_offset
        max_bytes = _READ_BYTES
        while True:
            r = await self._fetch(conn, offset, max_bytes)
            if r.error_code == E.offset_out_of_range and 0 <= offset < r.log_start_offset:
                offset = r.log_start_offset  # compaction never moves it; a deletion of records would
                continue
            if r.error_code != E.none:
                raise SchemaLogError(f"{SCHEMAS_TOPIC}-0: fetch from broker {leader}: {E(r.error_code).name}",
                                  not_leader=r.error_code == E.not_leader_or_follower)
            data = bytes(r.records or b"")
            rows, next_offset = _rows(data, offset)
            out += rows
            if next_offset == offset:
                if offset < r.high_watermark and len(data) >= max_bytes:
                    max_bytes *= 2  # a batch larger than asked for
                    continue
                return out, offset
            offset = next_offset
            if offset >= r.high_watermark:
                return out, offset

    async def _fetch(self, conn: BrokerConnection, offset: int, max_bytes: int) -> Any:
        body = fetch_req.FetchRequest(
            replica_id=BrokerId(-1),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
            min_bytes=i32(0), max_bytes=i32(max_bytes), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1),
            topics=(fetch_req.FetchTopic(topic=TopicName(SCHEMAS_TOPIC), partitions=(fetch_req.FetchPartition(
                partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset), log_start_offset=i64(-1),
                partition_max_bytes=i32(max_bytes)),)),),
            forgotten_topics_data=(), rack_id="")
        response = await conn.request(1, _FETCH_VERSION, body)
        for topic in response.responses:
            for r in topic.partitions:
                if topic.topic == SCHEMAS_TOPIC and r.partition_index == 0:
                    return r
        raise SchemaLogError(f"the fetch answer had no {SCHEMAS_TOPIC}-0")
