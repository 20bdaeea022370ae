"""A real cluster for tests: Debian's ZooKeeper and strom brokers as subprocesses on 127.0.0.1, plus
the checks every fault test ends with (replicas identical, acknowledged records all there once)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brokerproc import BrokerProcess, free_port
from helpers import ConnectionClosed, RawConnection, wait_until
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from strom.cluster import zk_layout as zl
from strom.cluster.zk_store import ZkMetadataStore
from strom.devcluster import ZooKeeperServer
from strom.records.batch import iter_batches, whole_batches_end

# Short timeouts so failures are noticed in seconds (ZooKeeper's tick 250 ms allows 0.5-5 s sessions).
SESSION_TIMEOUT_MS = 3000
CLUSTER_CONFIG = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
}


BrokerSettings = Callable[[int, int], dict[str, str]]


class ClusterBroker(BrokerProcess):
    """A cluster member: its SIGTERM is a controlled shutdown (up to 15 s of handing leaderships
    over, then deregistering), so a clean stop is given longer than a single broker's."""

    def stop(self, timeout: float = 60.0) -> int:
        return super().stop(timeout)


def _plaintext_at(b: BrokerProcess) -> bool:
    """Whether the listener on the broker's client port speaks PLAINTEXT (read as the broker reads
    its settings)."""
    from strom.config import BrokerConfig

    cfg = BrokerConfig.load(None, b.settings())
    return any(ls.port == b.port and cfg.listener_security_protocol_map.get(ls.name) == "PLAINTEXT"
               for ls in cfg.listeners)


class Cluster:
    """``broker_settings(broker id, client port)`` may add settings per broker (listeners, a
    zookeeper.connect through a proxy); they win over ``overrides``. The client port stays what
    ``bootstrap`` names."""

    def __init__(self, root: Path, size: int = 3, overrides: dict[str, str] | None = None,
                 broker_settings: BrokerSettings | None = None,
                 before_brokers: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.zookeeper = ZooKeeperServer(root / "zookeeper", free_port())
        self.brokers: dict[int, BrokerProcess] = {}
        self.overrides = dict(overrides or {})
        self.broker_settings = broker_settings
        self.before_brokers = before_brokers  # given ZooKeeper's address once it runs (e.g. to add users)
        self.size = size
        self._zk: KazooClient | None = None

    # ---- life -----------------------------------------------------------------------------------

    def start(self) -> Cluster:
        self.zookeeper.start()
        if self.before_brokers is not None:
            self.before_brokers(self.zookeeper.connect)
        for broker_id in range(1, self.size + 1):
            port = free_port()
            own = self.broker_settings(broker_id, port) if self.broker_settings is not None else {}
            b = ClusterBroker(self.root / f"broker-{broker_id}", port, overrides={
                "broker.id": str(broker_id), "zookeeper.connect": self.zookeeper.connect, **CLUSTER_CONFIG,
                **self.overrides, **own})
            self.brokers[broker_id] = b
        threads = [threading.Thread(target=b.start, kwargs={"timeout": 60}) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(b.alive() for b in self.brokers.values()), self.logs()
        wait_until(lambda: len(self.registered()) == self.size and self.controller() in self.brokers, 20,
                   what="every broker registered and a controller elected")
        self.settle()
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
        self.zookeeper.stop()

    def ensure_all_up(self) -> None:
        """Restart any broker a test left stopped, and wait until all are registered and every
        broker's view agrees with ZooKeeper."""
        for b in self.brokers.values():
            if not b.alive():
                b.start(timeout=60)
        wait_until(lambda: len(self.registered()) == self.size, 30, what="every broker registered")
        self.settle()

    def start_broker(self, broker_id: int, topics: Iterable[str] = ()) -> None:
        """Start a stopped broker again, then settle (its registration has reached every broker)."""
        self.brokers[broker_id].start(timeout=60)
        wait_until(lambda: broker_id in self.registered(), 30, what=f"broker {broker_id} registered")
        self.settle(topics)

    # ---- settle: the brokers' own views agree with ZooKeeper --------------------------------------

    def settle(self, topics: Iterable[str] = (), timeout: float = 30) -> None:
        """Return once every live, registered broker's own Metadata agrees with ZooKeeper: it lists
        the registered brokers and no others, names ZooKeeper's controller, and for each of
        ``topics`` gives each partition the leader, leader epoch and ISR of its state znode.

        Each broker learns of a change through its own ZooKeeper watch, a moment after ZooKeeper has
        it (and keeps a departed broker listed for a grace of a few seconds): a test that then asks
        any broker sees what ZooKeeper says. Brokers whose client port is not PLAINTEXT are not asked
        (their tests check their own view)."""
        names = list(topics)
        disagreement: list[str] = []

        def agreed() -> bool:
            disagreement.clear()
            why = self._disagreement(names)
            if why:
                disagreement.append(why)
            return not why

        try:
            wait_until(agreed, timeout, interval=0.05, what="the brokers' Metadata agreeing with ZooKeeper")
        except AssertionError as e:
            raise AssertionError(f"{e}: {disagreement[0] if disagreement else ''}") from None

    def _disagreement(self, topics: list[str]) -> str:
        """Why the brokers' views do not agree with ZooKeeper yet ('' once they do)."""
        try:
            registered = self.registered()
            controller = self.controller()
            states: dict[tuple[str, int], zl.PartitionState] = {}
            for topic in topics:
                for p in self.replicas(topic):
                    s = self.state(topic, p)
                    if s is None:
                        return f"{topic}-{p} has no state in ZooKeeper yet"
                    states[(topic, p)] = s
        except NoNodeError as e:
            return f"ZooKeeper has no {e}"
        if controller < 0:
            return "no controller"
        expected = {(i, self.brokers[i].port) for i in registered if i in self.brokers}
        for i in registered:
            b = self.brokers.get(i)
            if b is None or not b.alive() or not _plaintext_at(b):
                continue
            try:
                with RawConnection(b.bootstrap, timeout=2) as conn:
                    md = conn.metadata(topics)
            except (OSError, ConnectionClosed) as e:
                return f"broker {i} did not answer Metadata: {e!r}"
            listed = {(int(n.node_id), int(n.port)) for n in md.brokers}
            if listed != expected:
                return f"broker {i} lists brokers {sorted(listed)}, ZooKeeper has {sorted(expected)}"
            if int(md.controller_id) != controller:
                return f"broker {i} names controller {md.controller_id}, ZooKeeper {controller}"
            served = {(str(t.name), int(pm.partition_index)): pm for t in md.topics for pm in t.partitions}
            for (topic, p), s in states.items():
                pm = served.get((topic, p))
                if pm is None:
                    return f"broker {i} does not serve {topic}-{p} yet"
                want = (s.leader, s.leader_epoch, sorted(s.isr))
                seen = (int(pm.leader_id), int(pm.leader_epoch), sorted(int(r) for r in pm.isr_nodes))
                if seen[0] != want[0] or (s.leader >= 0 and seen != want):
                    return f"broker {i} has {topic}-{p} at leader/epoch/isr {seen}, ZooKeeper at {want}"
        return ""

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n" + "\n".join(b.log_lines[-40:]) for i, b in self.brokers.items())

    # ---- ZooKeeper's view -----------------------------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(self.zookeeper.connect, timeout=10)
            self._zk.start(10)
        return self._zk

    def registered(self) -> list[int]:
        return sorted(int(c) for c in self.zk.get_children(zl.BROKER_IDS))

    def controller(self) -> int:
        """The controller's broker id, -1 while there is none (one get: the node may go between calls)."""
        try:
            data = self.zk.get(zl.CONTROLLER)[0]
        except NoNodeError:
            return -1
        return zl.decode_controller(data) if data else -1

    def state(self, topic: str, partition: int) -> zl.PartitionState | None:
        try:
            data, stat = self.zk.get(zl.state_path(topic, partition))
        except Exception:
            return None
        return zl.decode_state(data, stat.version)

    def replicas(self, topic: str) -> dict[int, list[int]]:
        data, _ = self.zk.get(zl.topic_path(topic))
        return zl.decode_topic(topic, data).replicas

    def leader(self, topic: str, partition: int) -> int:
        s = self.state(topic, partition)
        return s.leader if s is not None else -1

    def wait_leader(self, topic: str, partition: int, not_in: set[int] = frozenset(),  # type: ignore[assignment]
                    timeout: float = 20) -> int:
        """A leader for the partition outside ``not_in`` in ZooKeeper, once every broker serves it."""
        deadline = time.monotonic() + timeout

        def ok() -> int | None:
            leader = self.leader(topic, partition)
            return leader if leader > 0 and leader not in not_in else None

        while True:
            leader = int(wait_until(ok, max(0.1, deadline - time.monotonic()),
                                    what=f"a leader for {topic}-{partition} outside {sorted(not_in)}"))
            self.settle([topic], max(1.0, deadline - time.monotonic()))
            if self.leader(topic, partition) == leader:
                return leader

    def wait_full_isr(self, topic: str, partitions: int, timeout: float = 30) -> None:
        """Every replica of the topic in its partitions' ISR in ZooKeeper, once every broker serves it."""
        def full() -> bool:
            reps = self.replicas(topic)
            for p in range(partitions):
                s = self.state(topic, p)
                if s is None or s.leader < 0 or sorted(s.isr) != sorted(reps[p]):
                    return False
            return True

        deadline = time.monotonic() + timeout
        wait_until(full, timeout, what=f"every replica of {topic} back in the ISR")
        self.settle([topic], max(1.0, deadline - time.monotonic()))


# ---- checks -------------------------------------------------------------------------------------

def log_batches(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch in a partition directory's segments."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        end = whole_batches_end(data)
        out += [(h.base_offset, h.last_offset, h.crc) for h in iter_batches(data[:end], verify_crc=False)]
    return out


def wait_replicas_identical(cluster: Cluster, topic: str, partitions: int, timeout: float = 30) -> None:
    """Every replica of every partition ends up with the same batches at the same offsets with the
    same CRCs (byte-identical logs, as far as batches go)."""
    reps = cluster.replicas(topic)

    def same() -> bool:
        for p in range(partitions):
            views = [log_batches(cluster.brokers[b].data_dir / f"{topic}-{p}") for b in reps[p]]
            if any(v != views[0] for v in views) or not views[0]:
                return False
        return True

    try:
        wait_until(same, timeout, what=f"identical replicas of {topic}")
    except AssertionError:
        detail = []
        for p in range(partitions):
            for b in reps[p]:
                batches = log_batches(cluster.brokers[b].data_dir / f"{topic}-{p}")
                detail.append(f"{topic}-{p} on {b}: {len(batches)} batches, last {batches[-1:]}")
        raise AssertionError("replicas differ:\n" + "\n".join(detail)) from None


UNKNOWN_OFFSET = -1  # an acknowledgement that came without its record's offset


@dataclass
class AckLog:
    """Every record a producer got an acknowledgement for: partition -> [(offset, value)], and when
    each acknowledgement came (time.monotonic(), in the same order)."""

    acked: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # Re-entrant: librdkafka calls delivery callbacks from inside flush() and poll(), and a test
    # that is being failed (pytest-timeout's signal) can leave this thread inside one; the
    # producer's flush in __exit__ must then still be able to take the lock, not hang the run.
    lock: threading.RLock = field(default_factory=threading.RLock)
    times: list[float] = field(default_factory=list)

    def on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                # librdkafka may report a record delivered without its offset (None: the broker's
                # answer to a retried batch it already had named none it could read): acknowledged
                # all the same, checked by value (UNKNOWN_OFFSET).
                offset = msg.offset()
                self.add(int(msg.partition()), UNKNOWN_OFFSET if offset is None else int(offset), bytes(msg.value()))

    def add(self, partition: int, offset: int, value: bytes) -> None:
        """One acknowledgement (the caller holds the lock)."""
        self.acked.setdefault(partition, []).append((offset, value))
        self.times.append(time.monotonic())

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def count_between(self, start: float, end: float) -> int:
        """Acknowledgements that came in [start, end) (time.monotonic())."""
        with self.lock:
            return sum(1 for t in self.times if start <= t < end)


class StreamingProducer:
    """An idempotent acks=all producer writing numbered values (``prefix`` + 8 digits) in a thread
    until stopped; ``bootstrap`` defaults to every live broker of the cluster."""

    def __init__(self, cluster: Cluster, topic: str, rate_per_s: float = 500, extra: dict[str, Any] | None = None,
                 prefix: bytes = b"v", bootstrap: str | None = None):
        from confluent_kafka import Producer

        assert len(prefix) == 1, "check_acknowledged tells producers apart by the first byte"
        self.topic = topic
        self.prefix = prefix
        self.acks = AckLog()
        self.producer = Producer({"bootstrap.servers": bootstrap or cluster.bootstrap, "acks": "all",
                                  "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 50,
                                  # A request to a frozen (SIGSTOPped) leader is given up after 6 s,
                                  # then retried where the metadata now points.
                                  "socket.timeout.ms": 6000, "request.timeout.ms": 6000,
                                  "topic.metadata.refresh.interval.ms": 1000, **(extra or {})})
        self.rate = rate_per_s
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StreamingProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        interval = 1 / self.rate
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=self.prefix + b"%08d" % self.sent,
                                      on_delivery=self.acks.on_delivery)
                self.sent += 1
            except BufferError:
                pass
            except Exception as e:  # a fatal producer error (e.g. idempotence lost): the checks report it
                with self.acks.lock:
                    self.acks.errors.append(f"produce failed: {e!r}")
                return
            try:
                self.producer.poll(0)
            except Exception as e:  # a failing callback must show in the checks, not stop the stream
                with self.acks.lock:
                    self.acks.errors.append(f"delivery callback failed: {e!r}")
            time.sleep(interval)

    def stop(self, flush_timeout: float = 120) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            left = self.producer.flush(flush_timeout)
            assert left == 0, f"{left} records still unacknowledged after {flush_timeout}s"


def read_partition(bootstrap: str, topic: str, partition: int, timeout: float = 30) -> list[tuple[int, bytes]]:
    """Every record of a partition from the beginning to its high watermark: [(offset, value)]."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        high = _high_watermark(c, topic, partition)
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline and high > 0:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def _high_watermark(consumer: Any, topic: str, partition: int, timeout: float = 20) -> int:
    """The partition's high watermark, asking again while the client's metadata catches up with a
    leader change (librdkafka says "Unknown partition" until then)."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def check_acknowledged(cluster: Cluster, topic: str, partitions: int, acks: AckLog | Sequence[AckLog]) -> int:
    """Nothing acknowledged lost, nothing duplicated, order per partition kept (per producer: each
    one's values start with a byte of its own). Returns the count of acknowledged records."""
    logs = [acks] if isinstance(acks, AckLog) else list(acks)
    total = 0
    for p in range(partitions):
        records = read_partition(cluster.bootstrap, topic, p)
        offsets = [o for o, _ in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        values = [v for _, v in records]
        assert len(set(values)) == len(values), f"{topic}-{p}: duplicated values"
        stored = dict(records)
        present = set(values)
        for log in logs:
            for offset, value in log.acked.get(p, []):
                if offset == UNKNOWN_OFFSET:
                    assert value in present, f"{topic}-{p}: acknowledged {value!r} (offset not told) is missing"
                    continue
                assert stored.get(offset) == value, \
                    f"{topic}-{p}: acknowledged {value!r} at offset {offset}, found {stored.get(offset)!r}"
            total += len(log.acked.get(p, []))
        # Each producer's values were produced in increasing order: the log keeps that order.
        by_producer: dict[bytes, list[int]] = {}
        for v in values:
            by_producer.setdefault(v[:1], []).append(int(v[1:]))
        for prefix, numbers in by_producer.items():
            assert numbers == sorted(numbers), f"{topic}-{p}: records of producer {prefix!r} out of order"
    return total


def iter_brokers(cluster: Cluster) -> Iterator[BrokerProcess]:
    return iter(cluster.brokers.values())


def run_until(loop: asyncio.AbstractEventLoop, check: Callable[[], object], timeout: float = 10) -> None:
    """Run ``loop`` (where ZkMetadataStore applies its updates) until ``check()`` holds."""
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.05)

    loop.run_until_complete(asyncio.wait_for(wait(), timeout))


@dataclass
class ZooKeeperView:
    """A broker's ZooKeeper view (ZkMetadataStore, broker 1) on its own event loop, and a plain
    kazoo client that plays the rest of the cluster."""
    loop: asyncio.AbstractEventLoop
    store: ZkMetadataStore
    other: KazooClient
