"""Shared test helpers: Java's murmur2 partitioner, a raw Kafka protocol connection, confluent-kafka
produce/consume shortcuts, and a validator for the partition logs a broker leaves on disk."""

from __future__ import annotations

import datetime
import os
import socket
import struct
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.protocol import wire
from strom.records import batch as rb
from strom.records import codec

# --------------------------------------------------------------------------------------------------
# Partitioners


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (Java), as a signed 32-bit int."""
    m = 0x5BD1E995
    r = 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4 : i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    base = n4 * 4
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, num_partitions: int) -> int:
    """Java's / kafka-python's / aiokafka's / librdkafka murmur2_random partition for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def librdkafka_consistent_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's default (consistent_random) partition for a non-null key: CRC32 of the key."""
    return zlib.crc32(key) % num_partitions


# --------------------------------------------------------------------------------------------------
# What a producer placed (the interop tests of kafka-python and aiokafka)

Placed = defaultdict[int, list[tuple[Any, ...]]]


def placed_by_partition(sent: Sequence[tuple[Any, ...]], metas: Sequence[Any], partitions: int) -> Placed:
    """The records ``sent`` (key, value, headers, timestamp) by the partition the producer's answers
    (``metas``: .partition and .offset, in send order) name, each as (offset, key, value, headers,
    timestamp). Checks what every client must see: a keyed record lands where Java's murmur2
    partitioner puts it, and each partition's offsets follow the send order from 0."""
    by_part: Placed = defaultdict(list)
    for (key, value, headers, ts), meta in zip(sent, metas, strict=True):
        if key is not None:
            assert meta.partition == java_partition(key, partitions), (key, meta.partition)
        by_part[meta.partition].append((meta.offset, key, value, headers, ts))
    for p, recs in by_part.items():
        assert [r[0] for r in recs] == list(range(len(recs))), f"partition {p}: offsets follow send order"
    return by_part


def check_offsets_for_times(found: Mapping[Any, Any], by_part: Placed, target: int) -> int:
    """Checks a client's offsets_for_times answer ``found`` (TopicPartition: OffsetAndTimestamp, or
    None) against ``by_part`` (as placed_by_partition gives it): each partition's first record at or
    after ``target``, None where there is none. Returns how many records lie at or after it."""
    total = 0
    for tp, oat in found.items():
        later = [r for r in by_part[tp.partition] if r[4] >= target]
        if later:
            assert oat is not None and oat.offset == later[0][0] and oat.timestamp == later[0][4]
            total += len(later)
        else:
            assert oat is None
    return total


# --------------------------------------------------------------------------------------------------
# Waiting


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------------
# Raw protocol


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def request_class(api: str, version: int, name: str) -> Any:
    module = __import__(f"kio.schema.{api}.v{version}.request", fromlist=[name])
    return getattr(module, name)


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """A blocking socket speaking Kafka frames; every read is bounded by ``timeout``."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str | None = "strom-tests",
                 source_address: str | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source_address, 0) if source_address else None)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self.client_id = client_id
        self._corr = 0
        self._buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._corr += 1
        return self._corr

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: Any) -> int:
        corr = self.next_correlation_id()
        self.sock.sendall(wire.encode_request(api_key, version, corr, self.client_id, body))
        return corr

    def read_frame(self) -> bytes:
        """One response frame (without its size prefix); ConnectionClosed on EOF."""
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack_from(">i", self._buf, 0)
                assert 0 <= size < 200 * 1024 * 1024, f"absurd response size {size}"
                if len(self._buf) >= 4 + size:
                    frame = bytes(self._buf[4 : 4 + size])
                    del self._buf[: 4 + size]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionClosed()
            self._buf += chunk

    def request(self, api_key: int, version: int, body: Any) -> Any:
        corr = self.send(api_key, version, body)
        frame = self.read_frame()
        got, response = wire.decode_response(api_key, version, frame)
        assert got == corr, f"correlation id {got} != {corr}"
        return response

    def pipelined(self, api_key: int, version: int, bodies: Iterable[Any]) -> list[Any]:
        """Send every request before reading any response (the broker answers in order)."""
        corrs = [self.send(api_key, version, body) for body in bodies]
        out = []
        for corr in corrs:
            got, response = wire.decode_response(api_key, version, self.read_frame())
            assert got == corr, f"correlation id {got} != {corr}"
            out.append(response)
        return out

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Read (and discard) until the peer closes; True if it did within the timeout."""
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(self.timeout)

    # ----- typed shortcuts -----

    def api_versions(self, version: int = 3) -> Any:
        cls = request_class("api_versions", version, "ApiVersionsRequest")
        body = cls(client_software_name="strom-tests", client_software_version="1") if version >= 3 else cls()
        return self.request(18, version, body)

    def metadata(self, topics: Iterable[str] | None, version: int = 12, auto_create: bool = False) -> Any:
        req = request_class("metadata", version, "MetadataRequest")
        rt = request_class("metadata", version, "MetadataRequestTopic")
        if topics is None:
            tlist = None
        elif version >= 10:
            tlist = tuple(rt(topic_id=None, name=t) for t in topics)
        else:
            tlist = tuple(rt(name=t) for t in topics)
        kwargs: dict[str, Any] = {"topics": tlist}
        if version >= 4:
            kwargs["allow_auto_topic_creation"] = auto_create
        if 8 <= version <= 10:
            kwargs["include_cluster_authorized_operations"] = False
        if version >= 8:
            kwargs["include_topic_authorized_operations"] = False
        return self.request(3, version, req(**kwargs))

    def advertised(self) -> tuple[dict[int, tuple[str, int]], tuple[str, int]]:
        """What a client on this connection's listener is told: every broker's (host, port) from
        Metadata, and the group coordinator's from FindCoordinator (retried while it loads)."""
        md = self.metadata(None)
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in md.brokers}
        req = request_class("find_coordinator", 4, "FindCoordinatorRequest")
        deadline = time.monotonic() + self.timeout
        while True:
            (coord,) = self.request(10, 4, req(key_type=0, coordinator_keys=("listener-check",))).coordinators
            if int(coord.error_code) == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert int(coord.error_code) == 0, coord
        return brokers, (coord.host, int(coord.port))

    def topic_id(self, topic: str) -> Any:
        md = self.metadata([topic])
        (t,) = md.topics
        assert int(t.error_code) == 0, t
        return t.topic_id

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     version: int = 4, validate_only: bool = False) -> Any:
        req = request_class("create_topics", version, "CreateTopicsRequest")
        ct = request_class("create_topics", version, "CreatableTopic")
        cfg = request_class("create_topics", version, "CreatableTopicConfig")
        topic = ct(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                   configs=tuple(cfg(name=k, value=v) for k, v in (configs or {}).items()))
        resp = self.request(19, version, req(topics=(topic,), timeout=ms(10000), validate_only=validate_only))
        (result,) = resp.topics
        return result

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9) -> Any:
        req = request_class("produce", version, "ProduceRequest")
        tpd = request_class("produce", version, "TopicProduceData")
        ppd = request_class("produce", version, "PartitionProduceData")
        body = req(transactional_id=None, acks=acks, timeout=ms(10000),
                   topic_data=(tpd(name=topic, partition_data=(ppd(index=partition, records=records),)),))
        resp = self.request(0, version, body)
        (t,) = resp.responses
        (p,) = t.partition_responses
        return p

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 10 << 20, max_wait_ms: int = 0,
              min_bytes: int = 0, version: int = 12) -> Any:
        req = request_class("fetch", version, "FetchRequest")
        ft = request_class("fetch", version, "FetchTopic")
        fp = request_class("fetch", version, "FetchPartition")
        body = req(cluster_id=None, replica_id=-1, max_wait=ms(max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
                   isolation_level=0, session_id=0, session_epoch=-1,
                   topics=(ft(topic=topic, partitions=(fp(partition=partition, current_leader_epoch=-1,
                                                         fetch_offset=offset, last_fetched_epoch=-1,
                                                         log_start_offset=-1, partition_max_bytes=max_bytes),)),),
                   forgotten_topics_data=(), rack_id="")
        resp = self.request(1, version, body)
        (t,) = resp.responses
        (p,) = t.partitions
        return p

    def fetch_records(self, topic: str, partition: int, offset: int = 0) -> list[codec.Record]:
        """Every record from ``offset`` to the high watermark (several fetches if needed)."""
        out: list[codec.Record] = []
        for _ in range(10_000):
            p = self.fetch(topic, partition, offset)
            assert int(p.error_code) == 0, p
            data = bytes(p.records or b"")
            if data:
                recs = [r for r in codec.read_all(data) if r.offset >= offset]
                out.extend(recs)
                offset = rb.iter_batches(data)[-1].next_offset
            if offset >= p.high_watermark or not data:
                return out
        raise AssertionError("fetch_records did not reach the high watermark")

    def list_offset(self, topic: str, partition: int, timestamp: int, version: int = 7) -> tuple[int, int]:
        req = request_class("list_offsets", version, "ListOffsetsRequest")
        lt = request_class("list_offsets", version, "ListOffsetsTopic")
        lp = request_class("list_offsets", version, "ListOffsetsPartition")
        body = req(replica_id=-1, isolation_level=0,
                   topics=(lt(name=topic, partitions=(lp(partition_index=partition, current_leader_epoch=-1,
                                                         timestamp=timestamp),)),))
        resp = self.request(2, version, body)
        (t,) = resp.topics
        (p,) = t.partitions
        assert int(p.error_code) == 0, p
        return int(p.offset), int(p.timestamp)

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.list_offset(topic, partition, -1)[0]

    def init_producer_id(self, version: int = 4) -> tuple[int, int]:
        req = request_class("init_producer_id", version, "InitProducerIdRequest")
        resp = self.request(22, version, req(transactional_id=None, transaction_timeout=ms(60000), producer_id=-1,
                                             producer_epoch=-1))
        assert int(resp.error_code) == 0, resp
        return int(resp.producer_id), int(resp.producer_epoch)


def values_batch(values: list[bytes], **kw: Any) -> bytes:
    return codec.build_batch([(None, v) for v in values], timestamp_ms=kw.pop("timestamp_ms", int(time.time() * 1000)),
                             **kw)


# --------------------------------------------------------------------------------------------------
# confluent-kafka shortcuts


def confluent_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic_code(admin: Any, topic: Any, validate_only: bool = False) -> int:
    """CreateTopics of one NewTopic through confluent-kafka's AdminClient: 0, or Kafka's error code."""
    from confluent_kafka import KafkaException

    try:
        admin.create_topics([topic], validate_only=validate_only, request_timeout=15)[topic.topic].result(30)
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def create_topics(bootstrap: str, topics: dict[str, int], configs: dict[str, str] | None = None) -> None:
    """Create topics with confluent-kafka's AdminClient and wait until metadata shows them."""
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap)
    futures = admin.create_topics([NewTopic(t, n, 1, config=dict(configs or {})) for t, n in topics.items()],
                                  operation_timeout=10, request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)

    def visible() -> bool:
        md = admin.list_topics(timeout=10)
        return all(t in md.topics and len(md.topics[t].partitions) == n for t, n in topics.items())

    wait_until(visible, 15, what=f"topics {list(topics)} in metadata")


@dataclass
class Delivered:
    key: bytes | None
    value: bytes
    partition: int
    offset: int
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: int | None = None


def confluent_produce(bootstrap: str, topic: str, records: list[dict[str, Any]], config: dict[str, Any] | None = None,
                      timeout: float = 30.0) -> list[Delivered]:
    """Produce ``records`` (dicts with key/value/headers/partition/timestamp) and return their delivery reports,
    in produce order; fails if any record was not delivered."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)}
    conf.update(config or {})
    producer = Producer(conf)
    results: list[Delivered | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery(i: int) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {i}: {err}")
                return
            rec = records[i]
            results[i] = Delivered(rec.get("key"), rec["value"], msg.partition(), msg.offset(),
                                   list(rec.get("headers") or []), msg.timestamp()[1])
        return cb

    for i, rec in enumerate(records):
        kwargs: dict[str, Any] = {"value": rec["value"], "on_delivery": on_delivery(i)}
        for name in ("key", "headers", "partition", "timestamp"):
            if rec.get(name) is not None:
                kwargs[name] = rec[name]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(timeout)
    assert left == 0, f"{left} records not delivered within {timeout}s"
    assert not errors, errors[:5]
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def confluent_consume(bootstrap: str, topic: str, partitions: Iterable[int], count: int, start: int | None = None,
                      timeout: float = 30.0, config: dict[str, Any] | None = None) -> list[Any]:
    """Assign partitions from ``start`` (default: the beginning) and read exactly ``count`` messages."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": f"strom-tests-{time.monotonic_ns()}",
            "enable.auto.commit": False, "enable.partition.eof": False}
    conf.update(config or {})
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING if start is None else start) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append(msg)
        assert len(out) == count, f"consumed {len(out)} of {count} messages from {topic} in {timeout}s"
        # Nothing beyond what was expected.
        extra = [m for m in consumer.consume(num_messages=100, timeout=0.3) if m.error() is None]
        assert not extra, f"{len(extra)} unexpected extra messages"
        return out
    finally:
        consumer.close()


# --------------------------------------------------------------------------------------------------
# On-disk validation


@dataclass
class PartitionDirCheck:
    segments: list[Path]
    batches: int
    start_offset: int
    next_offset: int


def validate_partition_dir(path: Path) -> PartitionDirCheck:
    """Every .log in a partition directory: whole batches, CRCs ok, offsets strictly increasing and contiguous
    across segments, first batch of a segment at or after its file's base offset."""
    segments = sorted(path.glob("*.log"), key=lambda p: int(p.stem))
    assert segments, f"no segment in {path}"
    expected: int | None = None
    start: int | None = None
    count = 0
    for seg in segments:
        base = int(seg.stem)
        assert len(seg.stem) == 20, seg
        data = seg.read_bytes()
        headers = rb.iter_batches(data)  # raises on bad CRC / lengths / magic
        for h in headers:
            assert h.base_offset >= base, f"{seg}: batch at {h.base_offset} below segment base {base}"
            if expected is not None:
                assert h.base_offset == expected, f"{seg}: batch at {h.base_offset}, expected {expected}"
            else:
                start = h.base_offset
            assert h.last_offset_delta == h.records_count - 1 or h.records_count == 0, h
            expected = h.next_offset
            count += 1
    return PartitionDirCheck(segments, count, start if start is not None else 0, expected if expected is not None else 0)


def validate_log_dir(data_dir: Path) -> dict[str, PartitionDirCheck]:
    """Validate every partition directory (``<topic>-<n>``) under a log dir."""
    out: dict[str, PartitionDirCheck] = {}
    for d in sorted(data_dir.iterdir()):
        if d.is_dir() and list(d.glob("*.log")):
            out[d.name] = validate_partition_dir(d)
    assert out, f"no partition directories in {data_dir}"
    return out


# --------------------------------------------------------------------------------------------------
# A well-behaved client running in the background


class BackgroundTraffic:
    """A confluent-kafka producer (acks=all, one record every ``interval`` s) and an assigned consumer on
    ``topic`` partition 0, each in its own thread. ``finish()`` stops producing, waits until the consumer has
    everything acknowledged and returns (acknowledged values, consumed values, errors)."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.02) -> None:
        import threading

        self.bootstrap = bootstrap
        self.topic = topic
        self.interval = interval
        self.acked: list[bytes] = []
        self.consumed: list[bytes] = []
        self.errors: list[str] = []
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> BackgroundTraffic:
        for t in self._threads:
            t.start()
        return self

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                             "message.timeout.ms": 30000})

        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"produce: {err}")
            else:
                self.acked.append(msg.value())

        i = 0
        while not self._stop_producing.is_set():
            producer.produce(self.topic, value=f"steady-{i}".encode(), partition=0, on_delivery=cb)
            producer.poll(self.interval)
            i += 1
        left = producer.flush(30)
        if left:
            self.errors.append(f"produce: {left} records not delivered at the end")

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"steady-{self.topic}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        try:
            while not self._stop_consuming.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    if msg.error() is not None:
                        self.errors.append(f"consume: {msg.error()}")
                    else:
                        self.consumed.append(msg.value() or b"")  # the producer never sends null values
        finally:
            consumer.close()

    def finish(self, timeout: float = 30.0) -> tuple[list[bytes], list[bytes], list[str]]:
        self._stop_producing.set()
        self._threads[0].join(timeout + 5)
        deadline = time.monotonic() + timeout
        while len(self.consumed) < len(self.acked) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop_consuming.set()
        self._threads[1].join(10)
        return list(self.acked), list(self.consumed), list(self.errors)


# ---- a process's TCP connections (Linux /proc) ------------------------------------------------------

def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def remote_ports(pid: int) -> list[int]:
    """The remote port of each established IPv4 TCP connection the process holds."""
    inodes = socket_inodes(pid)
    lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    return [int(f[2].rsplit(":", 1)[1], 16) for f in map(str.split, lines) if f[9] in inodes and f[3] == "01"]
