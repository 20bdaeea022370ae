"""ZkMetadataStore: cluster metadata in ZooKeeper (kazoo), with a cache kept current by watches.

ZooKeeper is the source of truth. Every broker watches the broker registrations, the topics, their
partition states and configs, and the controller; the watches' callbacks run on kazoo's thread and
hand each change to the event loop, where the cache is updated and listeners (the replica manager,
the controller, the topic manager) are told. Only the loop reads or writes the cache.

Writes are made from the loop with short synchronous calls (an admin operation, about a millisecond
on a local ZooKeeper) or from a thread (``run``); every update of a partition state is a
compare-and-set on the znode version, so a stale writer can never overwrite newer state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from strom.cluster import zk_layout as zl
from strom.cluster.metadata import (
    ClusterEvent,
    TopicInfo,
    TopicLookups,
    ZooKeeperUnavailable,
    _new_cluster_id,
    require_connected,
)
from strom.cluster.zk_layout import BrokerRegistration, PartitionState, TopicAssignment

log = logging.getLogger("strom.cluster")

T = TypeVar("T")
_ISR_BATCH = 500  # ISR changes per ZooKeeper transaction (each a compare-and-set of ~150 bytes)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@contextlib.contextmanager
def _lost_is_unavailable() -> Iterator[None]:
    """The connection lost during a call (the link cut or hung) is what ZooKeeperUnavailable says:
    the caller answers a retriable error instead of an unknown one."""
    try:
        yield
    except (ConnectionLoss, SessionExpiredError) as e:
        raise ZooKeeperUnavailable(f"lost the ZooKeeper connection ({type(e).__name__})") from e


def split_connect(connect: str) -> tuple[str, str]:
    """"h1:p1,h2:p2/chroot" -> ("h1:p1,h2:p2", "/chroot") (chroot "" when none)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


class ZkMetadataStore(TopicLookups):
    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int, broker_id: int) -> None:
        self.connect_string = connect
        self.broker_id = broker_id
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        hosts, self.chroot = split_connect(connect)
        self._hosts = hosts
        self.zk = KazooClient(hosts=hosts + self.chroot, timeout=session_timeout_ms / 1000,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
                              command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
        self.cluster_id = ""
        self.brokers: dict[int, BrokerRegistration] = {}
        # Brokers whose registration vanished, with when (loop time): Metadata keeps naming them
        # for a moment (see recently_departed).
        self.departed: dict[int, tuple[BrokerRegistration, float]] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self.controller_id = -1
        self.shutting_down: set[int] = set()  # brokers in a controlled shutdown
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self.listeners: list[Callable[[ClusterEvent], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched_topics: set[str] = set()
        # Partition states watched, with the topic id they belong to. They are read with pipelined
        # asynchronous gets, not kazoo's DataWatch (one synchronous round trip at a time on kazoo's
        # callback thread, and a session listener each): a controller's batch of a thousand state
        # writes reaches the cache in one round of reads, applied on the loop in one go.
        self._watched_states: dict[tuple[str, int], uuid.UUID] = {}
        self._state_watchers: dict[tuple[str, int], Callable[[Any], None]] = {}
        self._state_queue: list[tuple[tuple[str, int], uuid.UUID, PartitionState | None]] = []
        self._state_flush_posted = False
        self._states_unread: set[tuple[str, int]] = set()  # reads lost with the connection
        self._states_read: set[tuple[str, int]] = set()  # the loop: read at least once (made or not)
        # The loop: state reads that reached it before their topic's assignment (a flush posted for
        # another topic's reads can run before this topic's update): applied when it lands, since
        # nothing reads them again (a missing state's watch fires only on its creation).
        self._early_states: dict[str, list[tuple[tuple[str, int], uuid.UUID, PartitionState | None]]] = {}
        self._reread_posted = False
        # Topics whose deletion is requested (/admin/delete_topics): kazoo's thread only. Their
        # state znodes are about to go: a watch that fires on one is not followed by a read.
        self._deleting: frozenset[str] = frozenset()
        self._lock = threading.Lock()  # guards the "watched" collections and the state queue
        self._registration: BrokerRegistration | None = None
        self._lost = False
        self._closing = False
        self._brokers_stale = False  # a registration read failed: read them all again on reconnect
        self._pid_next = 0
        self._pid_end = -1

    # ---- connecting --------------------------------------------------------------------------

    def connect(self, loop: asyncio.AbstractEventLoop) -> None:
        """Blocking (run it in a thread): connect, create the base paths and the cluster id, and
        start the watches. Raises ZooKeeperUnavailable with a one-line reason."""
        self._loop = loop
        timeout = self.connection_timeout_ms / 1000
        if self.chroot:
            self._ensure_chroot(timeout)
        try:
            self.zk.start(timeout=timeout)
        except Exception as e:
            self.zk.close()
            raise ZooKeeperUnavailable(f"could not reach ZooKeeper at {self.connect_string} within "
                                       f"{self.connection_timeout_ms} ms ({e})") from None
        self.zk.add_listener(self._on_state)
        for path in zl.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zl.CLUSTER_ID, zl.encode_cluster_id(_new_cluster_id()))
        self.cluster_id = zl.decode_cluster_id(self.zk.get(zl.CLUSTER_ID)[0])
        self.zk.ChildrenWatch(zl.BROKER_IDS, self._brokers_changed)
        self.zk.ChildrenWatch(zl.TOPICS, self._topics_changed)
        self.zk.DataWatch(zl.CONTROLLER, self._controller_changed)
        self.zk.ChildrenWatch(zl.DELETE_TOPICS, self._deletes_requested)
        self.zk.ChildrenWatch(zl.CONTROLLED_SHUTDOWN, self._shutdowns_changed)
        for name in ("", str(self.broker_id)):
            self.zk.DataWatch(zl.broker_config_path(name), self._broker_config_watch(name))
        # A block of producer ids now, as Kafka's broker takes one at start: a broker later cut
        # from ZooKeeper still gives idempotent producers their ids from it.
        self._pid_next, self._pid_end = self._take_producer_id_block()

    def _ensure_chroot(self, timeout: float) -> None:
        """Kafka creates its chroot path when missing; so do we, through a client without it."""
        boot = KazooClient(hosts=self._hosts, timeout=self.session_timeout_ms / 1000)
        try:
            boot.start(timeout=timeout)
            boot.ensure_path(self.chroot)
        except Exception as e:
            raise ZooKeeperUnavailable(f"could not reach ZooKeeper at {self.connect_string} within "
                                       f"{self.connection_timeout_ms} ms ({e})") from None
        finally:
            boot.stop()
            boot.close()

    def close(self) -> None:
        self._closing = True  # kazoo reports its own stop as a lost session: not a warning then
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # already closed or never started
            pass

    def _on_state(self, state: str) -> None:
        """kazoo's thread: a lost session means our ephemeral nodes are gone; on the next connect
        the broker registers again and the controller election runs again."""
        if state == KazooState.LOST:
            self._lost = True
            if self._closing:
                log.info("ZooKeeper session closed")
            else:
                log.warning("ZooKeeper session expired")
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self._post(ClusterEvent("session"))
        if state == KazooState.CONNECTED and self._brokers_stale:
            self._brokers_stale = False
            self.zk.handler.spawn(self._reread_brokers)  # no blocking calls in a state listener
        if state == KazooState.CONNECTED and self._states_unread:
            self.zk.handler.spawn(self._reread_states)

    @property
    def connected(self) -> bool:
        return bool(self.zk.connected)

    def session_id(self) -> int:
        cid = self.zk.client_id
        return int(cid[0]) if cid else 0

    # ---- the loop side ------------------------------------------------------------------------

    def _post(self, event: ClusterEvent, update: Callable[[], None] | None = None) -> None:
        """From kazoo's thread: apply ``update`` to the cache on the loop, then tell the listeners."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def deliver() -> None:
            if update is not None:
                update()
            for listener in list(self.listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("cluster listener failed on %s", event)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the broker is stopping
            loop.call_soon_threadsafe(deliver)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking ZooKeeper call in a thread."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # ---- watches (kazoo's thread) ------------------------------------------------------------

    def _registrations(self, children: list[str]) -> dict[int, BrokerRegistration]:
        regs: dict[int, BrokerRegistration] = {}
        for child in children:
            try:
                data, stat = self.zk.retry(self.zk.get, f"{zl.BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            regs[int(child)] = zl.decode_broker(int(child), data, stat.czxid)
        return regs

    def _brokers_changed(self, children: list[str]) -> None:
        try:
            regs = self._registrations(children)
        except KazooException as e:
            self._brokers_unread(e)
            return

        def update() -> None:
            now = time.monotonic()
            for b, reg in self.brokers.items():
                if b not in regs:
                    self.departed[b] = (reg, now)
            for b in regs:
                self.departed.pop(b, None)
            self.brokers = regs

        self._post(ClusterEvent("brokers"), update)

    def _reread_brokers(self) -> None:
        try:
            children = self.zk.retry(self.zk.get_children, zl.BROKER_IDS)
        except KazooException as e:
            self._brokers_unread(e)
            return
        self._brokers_changed(children)

    def _brokers_unread(self, e: Exception) -> None:
        # kazoo calls the watch again only when the list of ids changes: without a read on
        # reconnect the broker would keep an old view of who is alive.
        if not self._closing:
            log.warning("could not read the broker registrations (%r): reading them again on reconnect", e)
            self._brokers_stale = True

    def recently_departed(self, within_s: float) -> list[BrokerRegistration]:
        """Brokers whose registration vanished less than ``within_s`` ago (oldest forgotten)."""
        now = time.monotonic()
        for b in [b for b, (_, t) in self.departed.items() if now - t > within_s]:
            del self.departed[b]
        return [reg for reg, _ in self.departed.values()]

    def _deletes_requested(self, children: list[str]) -> None:
        # kazoo delivers watch events in ZooKeeper's order, on one thread: a topic re-created after
        # its deletion is seen after its request node has gone from this list.
        self._deleting = frozenset(children)
        if children:
            self._post(ClusterEvent("delete_topics"))

    def _shutdowns_changed(self, children: list[str]) -> None:
        leaving = {int(c) for c in children if c.isdigit()}

        def update() -> None:
            self.shutting_down = leaving

        self._post(ClusterEvent("controlled_shutdown"), update)

    def _controller_changed(self, data: bytes | None, stat: Any) -> None:
        cid = zl.decode_controller(data) if data else -1

        def update() -> None:
            self.controller_id = cid

        self._post(ClusterEvent("controller"), update)

    def _topics_changed(self, children: list[str]) -> bool:
        names = set(children)
        with self._lock:
            new = names - self._watched_topics
            gone = self._watched_topics - names
            self._watched_topics = set(names)
        for name in sorted(new):
            self.zk.DataWatch(zl.topic_path(name), self._topic_watch(name))
            self.zk.DataWatch(zl.topic_config_path(name), self._topic_config_watch(name))
        for name in gone:
            def drop(name: str = name) -> None:
                self._forget_topic(name)

            self._post(ClusterEvent("topic", name), drop)
        return True

    def _topic_watch(self, name: str) -> Callable[[bytes | None, Any], bool]:
        def watch(data: bytes | None, stat: Any) -> bool:
            with self._lock:
                if name not in self._watched_topics:
                    return False
            if data is None:
                return True  # deleted: the children watch drops it
            assignment = zl.decode_topic(name, data)
            new_states = []
            with self._lock:
                for p in assignment.replicas:
                    if self._watched_states.get((name, p)) != assignment.topic_id:
                        self._watched_states[(name, p)] = assignment.topic_id
                        new_states.append(p)

            def update() -> None:
                self.assignments[name] = assignment
                self._refresh_topic(name)
                early = self._early_states.pop(name, None)
                if early:  # ahead of any read queued since: those are newer
                    self._requeue_states(early, ahead=True)

            self._post(ClusterEvent("topic", name), update)
            for p in new_states:
                self._read_state((name, p))  # all of them in flight at once
            return True

        return watch

    # ---- partition states: pipelined reads, applied in batches -------------------------------

    def _read_state(self, key: tuple[str, int]) -> None:
        """Any thread: read a watched state and watch it again (asynchronously: many in flight)."""
        if self._closing:
            # kazoo's stop ends the connection thread before its callback workers: a request made
            # now would wait forever on the connection's wake-up socket once that is full.
            return
        with self._lock:
            if key not in self._watched_states:
                return
            watcher = self._state_watchers.get(key)
            if watcher is None:
                watcher = self._state_watchers[key] = functools.partial(self._state_event, key)
        self.zk.get_async(zl.state_path(*key), watch=watcher).rawlink(functools.partial(self._state_read, key, watcher))

    def _state_event(self, key: tuple[str, int], event: Any) -> None:
        if key[0] in self._deleting:
            # The controller is removing the topic's znodes: no read (its answer would be "gone",
            # and then a watch on a node that is never made again). The topic leaves the cache
            # in one step when its topic node goes.
            return
        self._read_state(key)  # changed, created, deleted, or the session went: read it again

    def _state_read(self, key: tuple[str, int], watcher: Callable[[Any], None], result: Any) -> None:
        try:
            data, stat = result.get_nowait()
        except NoNodeError:
            if self._closing:
                return
            # Not made yet (the controller makes it): watch for its creation.
            self.zk.exists_async(zl.state_path(*key), watch=watcher).rawlink(
                functools.partial(self._state_exists, key))
            return
        except Exception as e:
            self._state_unread(key, e)
            return
        self._queue_state(key, zl.decode_state(data, stat.version) if data else None)

    def _state_exists(self, key: tuple[str, int], result: Any) -> None:
        try:
            stat = result.get_nowait()
        except Exception as e:
            self._state_unread(key, e)
            return
        if stat is not None:
            self._read_state(key)  # made between the get and the exists
        else:
            self._queue_state(key, None)

    def _state_unread(self, key: tuple[str, int], e: Exception) -> None:
        if self._closing:
            return
        with self._lock:
            self._states_unread.add(key)
            again = isinstance(e, (ConnectionLoss, SessionExpiredError)) and not self._reread_posted
            if again:
                self._reread_posted = True
        if again and self.zk.connected:  # back already: the CONNECTED listener may have run before
            self.zk.handler.spawn(self._reread_states)
        log.debug("reading the state of %s-%d failed (%r); reading it again on reconnect", *key, e)

    def _reread_states(self) -> None:
        with self._lock:
            keys, self._states_unread = self._states_unread, set()
            self._reread_posted = False
        for key in keys:
            self._read_state(key)

    def _queue_state(self, key: tuple[str, int], state: PartitionState | None) -> None:
        """kazoo's thread: hand a state read to the loop; a burst of them goes over in one call."""
        with self._lock:
            topic_id = self._watched_states.get(key)
            if topic_id is None:
                return
            self._state_queue.append((key, topic_id, state))
            if self._state_flush_posted:
                return
            self._state_flush_posted = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the broker is stopping
            loop.call_soon_threadsafe(self._flush_states)

    def _flush_states(self) -> None:
        """The loop: apply every state read since the last call, then tell the listeners."""
        with self._lock:
            batch, self._state_queue = self._state_queue, []
            self._state_flush_posted = False
        changed = [key for key, topic_id, state in batch if self._set_state(key, topic_id, state)]
        for key in changed:
            event = ClusterEvent("state", key[0], key[1])
            for listener in list(self.listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("cluster listener failed on %s", event)

    def _set_state(self, key: tuple[str, int], topic_id: uuid.UUID, state: PartitionState | None) -> bool:
        """The cache takes ``state`` unless it is older than what it has; True when it changed."""
        current = self.assignments.get(key[0])
        if current is None or current.topic_id != topic_id:
            with self._lock:
                watched = self._watched_states.get(key) == topic_id
            if watched:  # read before its topic's assignment reached the cache: kept until it does
                self._early_states.setdefault(key[0], []).append((key, topic_id, state))
            return False
        first = key not in self._states_read
        self._states_read.add(key)
        if state is None:
            return self.states.pop(key, None) is not None or first
        old = self.states.get(key)
        if old is not None and (old == state or old.zk_version > state.zk_version):
            return False  # the same, or a read overtaken by a newer one
        self.states[key] = state
        return True

    def state_known(self, topic: str, partition: int) -> bool:
        """Whether the partition's state znode has been read (it may not exist): until then a
        missing state in the cache says nothing."""
        return (topic, partition) in self._states_read

    def learned_state(self, topic: str, partition: int, state: PartitionState) -> None:
        """The loop: a state this broker has just written (the controller), in the cache now rather
        than when the watch brings it back; the listeners are told as for a watched change."""
        assignment = self.assignments.get(topic)
        if assignment is None:
            return
        self._requeue_states([((topic, partition), assignment.topic_id, state)])

    def _requeue_states(self, reads: list[tuple[tuple[str, int], uuid.UUID, PartitionState | None]],
                        *, ahead: bool = False) -> None:
        """The loop: states to apply in the next batch, as if just read (``ahead``: before the reads
        already queued)."""
        with self._lock:
            if ahead:
                self._state_queue[:0] = reads
            else:
                self._state_queue.extend(reads)
            if self._state_flush_posted:
                return
            self._state_flush_posted = True
        asyncio.get_running_loop().call_soon(self._flush_states)

    def _topic_config_watch(self, name: str) -> Callable[[bytes | None, Any], bool]:
        def watch(data: bytes | None, stat: Any) -> bool:
            with self._lock:
                if name not in self._watched_topics:
                    return False
            configs = zl.decode_config(data) if data else {}

            def update() -> None:
                self.topic_configs[name] = configs
                self._refresh_topic(name)

            self._post(ClusterEvent("topic_config", name), update)
            return True

        return watch

    def _broker_config_watch(self, resource: str) -> Callable[[bytes | None, Any], None]:
        def watch(data: bytes | None, stat: Any) -> None:
            configs = zl.decode_config(data) if data else {}

            def update() -> None:
                if configs:
                    self._broker_configs[resource] = configs
                else:
                    self._broker_configs.pop(resource, None)

            self._post(ClusterEvent("broker_config", resource), update)

        return watch

    # ---- the cache (loop) ----------------------------------------------------------------------

    def _refresh_topic(self, name: str) -> None:
        a = self.assignments.get(name)
        if a is None:
            return
        old = self._topics.get(name)
        if old is not None and old.topic_id != a.topic_id:
            self._by_id.pop(old.topic_id, None)
        info = TopicInfo(name, a.topic_id, len(a.replicas), dict(self.topic_configs.get(name, {})),
                         name in INTERNAL_TOPICS)
        self._topics[name] = info
        self._by_id[info.topic_id] = info

    def _forget_topic(self, name: str) -> None:
        info = self._topics.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
        a = self.assignments.pop(name, None)
        self.topic_configs.pop(name, None)
        with self._lock:
            for p in (a.replicas if a else ()):
                self._watched_states.pop((name, p), None)
                self._state_watchers.pop((name, p), None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]
        self._states_read -= {k for k in self._states_read if k[0] == name}
        self._early_states.pop(name, None)

    def live_brokers_in_zookeeper(self) -> dict[int, str | None]:
        """The registered brokers read from ZooKeeper itself, as Kafka's topic creation reads them:
        the watch may not yet have delivered a broker that registered a moment ago."""
        self._require_connection()
        with _lost_is_unavailable():
            return {b: r.rack for b, r in self._registrations(self.zk.get_children(zl.BROKER_IDS)).items()}

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.states.get((topic, partition))

    def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """Blocking: the partition's state as ZooKeeper has it now, for the controller when the
        watched copy turned out stale (a compare-and-set it made was refused)."""
        try:
            data, stat = self.zk.get(zl.state_path(topic, partition))
        except NoNodeError:
            return None
        return zl.decode_state(data, stat.version) if data else None

    # ---- MetadataStore (topics(), get_topic() and topic_by_id() come from TopicLookups) -------

    def _require_connection(self) -> None:
        """Called before the writes that run on the event loop (admin requests): without a ZooKeeper
        connection kazoo would hold the call, and the whole broker with it, until one comes back."""
        require_connected(self.zk, self.connect_string)

    def create_topic_assignment(self, name: str, topic_id: uuid.UUID, replicas: dict[int, list[int]],
                                configs: dict[str, str]) -> None:
        """Blocking: the config node first, then the topic node (what the controller watches)."""
        self._require_connection()
        data = zl.encode_config(dict(configs))
        with _lost_is_unavailable():
            try:
                self.zk.create(zl.topic_config_path(name), data, makepath=True)
            except NodeExistsError:
                self.zk.set(zl.topic_config_path(name), data)
            self.zk.create(zl.topic_path(name), zl.encode_topic(TopicAssignment(name, topic_id, replicas, {}, {})))

    def add_partitions(self, name: str, replicas: dict[int, list[int]]) -> None:
        """Blocking: extend the topic's assignment (compare-and-set on the topic node)."""
        data, stat = self.zk.get(zl.topic_path(name))
        current = zl.decode_topic(name, data)
        merged = {**current.replicas, **replicas}
        self.zk.set(zl.topic_path(name), zl.encode_topic(TopicAssignment(
            name, current.topic_id, merged, current.adding, current.removing)), version=stat.version)

    def subtrees_bottom_up(self, roots: list[str],
                           assume: Callable[[str], list[str] | None] = lambda path: None) -> list[list[str]]:
        """Blocking: for each of ``roots``, every znode under it and the root itself, children
        before their parent (an order they can be deleted in); [] for a root that does not exist.
        Read a level at a time with pipelined asynchronous reads, all roots together; the children
        of a node for which ``assume`` answers a list are taken from it, not read (a deletion then
        fails on a wrong guess, and the caller walks again without guessing)."""
        found: list[list[str]] = [[] for _ in roots]
        level = list(enumerate(roots))
        while level:
            pending = []
            for i, path in level:
                guess = assume(path)
                pending.append((i, path, guess if guess is not None else self.zk.get_children_async(path)))
            level = []
            for i, path, result in pending:
                try:
                    children = result if isinstance(result, list) else result.get()
                except NoNodeError:
                    continue  # gone meanwhile (or never there)
                found[i].append(path)
                level += [(i, f"{path}/{child}") for child in children]
        return [f[::-1] for f in found]  # breadth-first order reversed: every child precedes its parent

    def request_delete(self, name: str) -> None:
        self._require_connection()
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zl.delete_topic_path(name), b"", makepath=True)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._require_connection()
        self.zk.set(zl.topic_config_path(name), zl.encode_config(dict(configs)))
        self.topic_configs[name] = dict(configs)  # at once for this broker; the watch tells the others
        self._refresh_topic(name)

    def broker_configs(self, resource_name: str) -> dict[str, str]:
        return dict(self._broker_configs.get(resource_name, {}))

    def set_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None:
        self._require_connection()
        path = zl.broker_config_path(resource_name)
        data = zl.encode_config(dict(configs))
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)
        if configs:
            self._broker_configs[resource_name] = dict(configs)
        else:
            self._broker_configs.pop(resource_name, None)

    def group_configs(self, group_id: str) -> dict[str, str]:
        """A GROUP resource's configs, at /config/groups/<group>: read on first use, then kept
        current by a watch (another broker's IncrementalAlterConfigs reaches this one)."""
        cached = self._group_configs.get(group_id)
        if cached is None:
            self._require_connection()
            # kazoo's DataWatch reads the node (or learns it is absent) now, in this thread, and
            # calls the watch again on kazoo's thread at every change.
            self.zk.DataWatch(zl.group_config_path(group_id), self._group_config_watch(group_id))
            cached = self._group_configs.get(group_id, {})
        return dict(cached)

    def _group_config_watch(self, group_id: str) -> Callable[[bytes | None, Any], None]:
        def watch(data: bytes | None, stat: Any) -> None:
            # One assignment (atomic): the loop reads the entry, never a half-made one.
            self._group_configs[group_id] = zl.decode_config(data) if data else {}

        return watch

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        self._require_connection()
        path = zl.group_config_path(group_id)
        data = zl.encode_config(dict(configs))
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)
        self._group_configs[group_id] = dict(configs)

    def allocate_producer_id(self) -> int:
        """Producer ids come in blocks of 1000 taken from /latest_producer_id_block by
        compare-and-set, so no two brokers ever hand out the same id."""
        if self._pid_next > self._pid_end:
            self._pid_next, self._pid_end = self._take_producer_id_block()
        pid = self._pid_next
        self._pid_next += 1
        return pid

    def _take_producer_id_block(self) -> tuple[int, int]:
        self._require_connection()
        while True:
            try:
                data, stat = self.zk.get(zl.PRODUCER_ID_BLOCK)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(zl.PRODUCER_ID_BLOCK, b"")
                continue
            start = zl.decode_producer_id_block_end(data) + 1
            end = start + zl.PRODUCER_ID_BLOCK_SIZE - 1
            try:
                self.zk.set(zl.PRODUCER_ID_BLOCK, zl.encode_producer_id_block(self.broker_id, start, end),
                            version=stat.version)
                return start, end
            except BadVersionError:
                continue  # another broker took a block meanwhile

    # ---- registration -----------------------------------------------------------------------

    def register_broker(self, reg: BrokerRegistration, wait_s: float) -> None:
        """Blocking: the ephemeral /brokers/ids/<id>. A node left by this broker's previous life
        (killed, its session not expired yet) is waited out, as Kafka does; another live broker
        with the same id is an error."""
        self._registration = reg
        path = zl.broker_path(reg.broker_id)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.zk.create(path, zl.encode_broker(reg), ephemeral=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id():
                    return
                if time.monotonic() > deadline:
                    raise ZooKeeperUnavailable(
                        f"broker.id {reg.broker_id} is registered in ZooKeeper by another live broker") from None
                time.sleep(0.2)

    def reregister(self) -> None:
        if self._registration is not None:
            self.register_broker(self._registration, self.session_timeout_ms / 1000 + 5)

    def request_controlled_shutdown(self) -> None:
        """Blocking: ask the controller to move this broker's leaderships away."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zl.controlled_shutdown_path(self.broker_id), b"", ephemeral=True, makepath=True)

    def deregister(self) -> None:
        """Blocking: remove our registration (a clean stop; the controller moves leaders at once)."""
        if self._registration is None:
            return
        try:
            _, stat = self.zk.get(zl.broker_path(self.broker_id))
            if stat.ephemeralOwner == self.session_id():
                self.zk.delete(zl.broker_path(self.broker_id))
        except NoNodeError:
            pass

    # ---- partition state writes ----------------------------------------------------------------

    def update_isr(self, topic: str, partition: int, new: PartitionState) -> PartitionState | None:
        """Blocking, for a leader changing its ISR: compare-and-set on the version it knows. Returns
        the state as written (with its new version), or None when someone else changed it first."""
        try:
            stat = self.zk.set(zl.state_path(topic, partition), zl.encode_state(new), version=new.zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return PartitionState(new.leader, new.leader_epoch, new.isr, new.controller_epoch, stat.version)

    def update_isrs(self, changes: list[tuple[str, int, PartitionState]]) -> list[PartitionState | None]:
        """Blocking: ``update_isr`` for many partitions, up to _ISR_BATCH per transaction. A change
        refused in one (its state changed meanwhile) comes back None and the rest are committed."""
        out: list[PartitionState | None] = [None] * len(changes)
        for start in range(0, len(changes), _ISR_BATCH):
            pending = list(range(start, min(start + _ISR_BATCH, len(changes))))
            while pending:
                txn = self.zk.transaction()
                for i in pending:
                    topic, p, new = changes[i]
                    txn.set_data(zl.state_path(topic, p), zl.encode_state(new), version=new.zk_version)
                results = txn.commit()
                failed = {pending[k] for k, r in enumerate(results)
                          if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))}
                if not failed:
                    if any(isinstance(r, Exception) for r in results):
                        raise RuntimeError(f"ISR transaction failed: {results!r}")
                    for k, i in enumerate(pending):
                        new = changes[i][2]
                        out[i] = PartitionState(new.leader, new.leader_epoch, new.isr, new.controller_epoch,
                                                results[k].version)
                    break
                pending = [i for i in pending if i not in failed]
        return out
