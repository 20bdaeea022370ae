"""The broker's side of the schema registry's ``SchemaLog`` (strom.registry.store): the one
partition of ``_schemas``, appended to as its leader (acks=all, through the replica manager like a
coordinator's writes) and read up to its high watermark. Built by the registry's listener
(strom.admin.registry) from the few parts of the broker it uses."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from strom.clock import now_ms
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec
from strom.replication.leader_append import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.topics import TopicManager
    from strom.cluster.metadata import MetadataStore
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log_manager import LogManager

SCHEMAS_TOPIC = "_schemas"
_READ_BYTES = 1 << 20


class SchemaLogError(Exception):
    pass


class BrokerSchemaLog:
    def __init__(self, replicas: ReplicaManager, log_manager: LogManager, topics: TopicManager,
                 metadata: MetadataStore, serving: asyncio.Event, live_brokers: Callable[[], int],
                 error: type[Exception] = SchemaLogError) -> None:
        self._replicas = replicas
        self._log_manager = log_manager
        self._topics = topics
        self._metadata = metadata
        self._serving = serving
        self._live_brokers = live_brokers
        self._error = error  # the registry's SchemaLogError: raised as the registry knows it

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

    async def append(self, records: Sequence[tuple[bytes, bytes | None]], timeout_s: float) -> None:
        self._ensure_topic()
        buf = bytearray(codec.build_batch(list(records), timestamp_ms=now_ms()))
        outcome = self._replicas.append_records(-1, timeout_s, [(SCHEMAS_TOPIC, 0, buf)], AppendOrigin.COORDINATOR)
        results = outcome if isinstance(outcome, list) else await outcome
        error = E(results[0]["error_code"])
        if error is not E.none:
            raise self._error(f"{SCHEMAS_TOPIC}-0: {error.name}")

    async def read(self, from_offset: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        plog = self._log_manager.get_log(SCHEMAS_TOPIC, 0)
        if plog is None:
            return [], from_offset
        offset = max(from_offset, plog.log_start_offset)
        end = plog.high_watermark
        out: list[tuple[int, bytes | None, bytes | None]] = []
        loop = asyncio.get_running_loop()
        max_bytes = _READ_BYTES
        while offset < end:
            data = await loop.run_in_executor(None, functools.partial(plog.read, offset, max_bytes, max_offset=end))
            data = bytes(data) if data else b""
            next_offset = offset
            for header in rb.iter_batches(data[:rb.whole_batches_end(data)]):
                if header.next_offset <= offset:
                    continue
                next_offset = header.next_offset
                if header.is_control:
                    continue
                out += [(r.offset, r.key, r.value) for r in codec.iter_records(data, header) if r.offset >= offset]
            if next_offset == offset:
                if len(data) < max_bytes:
                    break
                max_bytes *= 2
                continue
            offset = next_offset
        return out, max(offset, from_offset)
