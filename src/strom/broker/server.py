"""The broker process: owns the event loop, the log manager, cluster metadata and the listeners."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from strom.broker.acceptor import Acceptor, ConnectionLimits, ListenerBindError, bind
from strom.broker.acls import AclManager
from strom.broker.config_admin import ConfigAdmin, load_persisted
from strom.broker.connection import KafkaConnection
from strom.broker.connection_quotas import ConnectionQuotas
from strom.broker.coordinator_host import CoordinatorHost
from strom.broker.fetch_sessions import FetchSessionCache
from strom.broker.handlers import ApiHandler, discover
from strom.broker.log_maintenance import LogMaintenance
from strom.broker.metrics import BrokerMetrics
from strom.broker.quota_manager import QuotaManager
from strom.broker.share_host import BrokerShareHost, ClusterPersister, LocalPersister, PartitionEndOffsets
from strom.broker.topics import TopicManager
from strom.broker.txn_markers import TxnMarkers
from strom.clock import now_ms
from strom.cluster.metadata import BrokerInfo, LocalMetadataStore, MetadataStore
from strom.cluster.one_node import OneNodeStates
from strom.config import LiveConfig, log_config_for
from strom.coordinator.config import GroupRuntimeConfig, TxnRuntimeConfig, share_runtime_topic
from strom.coordinator.consumer_group import TopicImage
from strom.coordinator.group_runtime import GroupCoordinatorRuntime
from strom.coordinator.share_runtime import ShareCoordinatorRuntime, ShareRuntimeConfig
from strom.coordinator.txn_runtime import TransactionCoordinatorRuntime
from strom.replication.purgatory import Purgatory
from strom.replication.replica_manager import ReplicaManager, ReplicaStates
from strom.security import listener as listener_security
from strom.security.acl_store import AclStore, LocalAclStore, ZkAclStore
from strom.security.client import inter_broker as inter_broker_client
from strom.security.credentials import CredentialStore, FileCredentialStore
from strom.security.quota_store import LocalQuotaStore, QuotaStore, ZkQuotaStore
from strom.security.scram import ScramCredential
from strom.share.manager import SharePartitionManager, ShareSettings
from strom.storage.log_manager import LogManager

if TYPE_CHECKING:
    from strom.broker.cluster_node import ClusterNode
    from strom.cluster.zk_credentials import ZkCredentialStore
    from strom.cluster.zk_store import ZkMetadataStore
    from strom.config import BrokerConfig
    from strom.storage.log import PartitionLog

log = logging.getLogger("strom.broker")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        # The config in force: dynamic broker configs replace it (ConfigAdmin, and in a cluster their
        # change in ZooKeeper); ``config`` reads it.
        self.live_config = LiveConfig(config)
        # First: a security setting that cannot be honoured stops the broker before it touches disk.
        self.security = listener_security.build(config)
        self.inter_broker_security = inter_broker_client(config)  # how replica fetchers connect
        self.handlers: dict[int, ApiHandler] = discover()
        self.purgatory = Purgatory()
        # Fetch sessions (KIP-227): marked through the purgatory's notifications.
        self.fetch_sessions = FetchSessionCache(
            lambda: self.live_config.value.max_incremental_fetch_session_cache_slots, now_ms)
        self.purgatory.listeners.append(self.fetch_sessions.on_change)
        self.connections: set[KafkaConnection] = set()
        # max.connections, per listener and per address (a name in the overrides that does not
        # resolve stops the broker here, naming the key).
        self.connection_limits = ConnectionLimits(ConnectionQuotas.from_config(config), self.connections)
        log_dirs = list(config.log_dirs)
        for d in log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        # With zookeeper.connect the broker is one of a cluster (broker/cluster_node.py), its metadata
        # and SCRAM users in ZooKeeper; alone it keeps them in files in the first log dir.
        self.cluster: ClusterNode | None = None
        self.metadata: MetadataStore
        self.credentials: CredentialStore
        states: ReplicaStates  # the partition states replication acts on
        zk: ZkMetadataStore | None = None
        zk_credentials: ZkCredentialStore | None = None
        if config.zookeeper_connect:
            from strom.broker.cluster_node import zookeeper_stores

            zk, zk_credentials = zookeeper_stores(config)
            self.metadata = states = zk
            self.credentials = zk_credentials
        else:
            local = self.metadata = LocalMetadataStore(log_dirs[0])
            self.live_config.replace(load_persisted(config, self.metadata))  # + dynamic broker configs
            config = self.config
            states = OneNodeStates(local, config.broker_id)  # one broker: a one-node cluster
            self.credentials = FileCredentialStore(log_dirs[0])
        self.log_manager = LogManager(log_dirs, log_config_for(config, {}), now_ms=now_ms)
        self.live_config.subscribe(self._new_log_defaults)
        self.topics = TopicManager(self.live_config, self.metadata, self.log_manager, zk, self.spawn)
        # Retention and the log cleaner.
        self.maintenance = LogMaintenance(self.live_config, self.log_manager, self.spawn,
                                          lambda topic, p: self.purgatory.notify((topic, p)))
        self.config_admin = ConfigAdmin(self.live_config, self.metadata, self.log_manager, self.topics.log_config,
                                        self.maintenance.config_changed)
        # ACLs and client quotas are kept in files on one broker, in ZooKeeper in a cluster.
        acl_store: AclStore = ZkAclStore(zk.zk) if zk is not None else LocalAclStore(log_dirs[0])
        quota_store: QuotaStore = ZkQuotaStore(zk.zk) if zk is not None else LocalQuotaStore(log_dirs[0])
        # authorizer.class.name: who may do what (strom.security.acl)
        self.acls = AclManager(config, acl_store, self.spawn)
        self.quotas = QuotaManager(config, quota_store, self.spawn)  # client quotas: throttling (strom.security.quotas)
        self.metrics = BrokerMetrics()
        # The leader's side of every write, and in a cluster the followers' fetchers.
        self.replica_manager = ReplicaManager(
            config.broker_id, states, self.log_manager, self.purgatory,
            config=lambda: self.live_config.value, spawn=self.spawn,
            inter_broker_security=self.inter_broker_security, topic_log_config=self.topics.log_config,
            on_topic_config=self.config_admin.apply_topic, on_client_append=self.metrics.produced)
        if zk is not None and zk_credentials is not None:
            from strom.broker.cluster_node import ClusterNode
            from strom.cluster.peer_metadata import PeerMetadata

            self.cluster = ClusterNode(zk, zk_credentials, self.live_config, self.replica_manager,
                                       self.config_admin.apply_broker_config, self.topics.log_config, self.spawn)
            # CreateTopics answers once every broker's Metadata shows the new leaders.
            self.topics.peers = PeerMetadata(config.broker_id, lambda: zk.brokers,
                                             lambda: self.config.inter_broker_listener_name or "",
                                             lambda: self.inter_broker_security)
        self._acceptors: list[Acceptor] = []
        self._stopping = asyncio.Event()
        # Share groups' data side (KIP-932): made at start, once the share coordinator has loaded.
        self.share_coordinator: ShareCoordinatorRuntime | None = None
        self.share_manager: SharePartitionManager | None = None
        # The share partitions' persister (local on a broker of its own), and the partitions' end
        # offsets for the lag DescribeShareGroupOffsets answers.
        self.share_persister: LocalPersister | ClusterPersister | None = None
        self.share_end_offsets: PartitionEndOffsets | None = None
        self.serving = asyncio.Event()  # set once start() is done: logs loaded, listeners accepting
        self._background: set[asyncio.Task[Any]] = set()
        self.node: BrokerInfo = BrokerInfo(config.broker_id, "127.0.0.1", 9092)  # the first advertised listener
        self.advertised: dict[str, BrokerInfo] = {}  # listener name -> how clients on it reach this broker
        self.services: list[Any] = []  # start()/stop() with the broker, first and last (strom.admin's HTTP server)
        # The schema registry's URLs once its listeners are bound (strom.admin.registry), published in
        # the broker's registration so that other brokers can forward registry writes here.
        self.schema_registry_urls: list[str] = []

    @property
    def config(self) -> BrokerConfig:
        """The broker config in force now (``live_config.value``)."""
        return self.live_config.value

    def _new_log_defaults(self, config: BrokerConfig) -> None:
        """A new broker config: the log config of topics without overrides follows it."""
        self.log_manager.default_config = log_config_for(config, {})

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get(user, mechanism)

    # ApiVersions is needed by the connection for the fallback answer, so it lives here.
    def api_versions_body(self, error_code: int = 0) -> dict[str, Any]:
        hidden = self.unadvertised_api_keys()
        return {
            "error_code": error_code,
            "api_keys": [
                {"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
                for h in sorted(self.handlers.values(), key=lambda h: h.api_key)
                if h.api_key not in hidden
            ],
            "throttle_time": 0,
        }

    def _topic_images(self) -> dict[str, TopicImage]:
        """The topics as the group coordinator sees them (for classic members of consumer groups)."""
        return {name: TopicImage(info.topic_id, info.partitions) for name, info in self.metadata.topics().items()}

    def unadvertised_api_keys(self) -> frozenset[int]:
        """APIs served but not offered: the consumer protocol's (ConsumerGroupHeartbeat 68,
        ConsumerGroupDescribe 69) when group.coordinator.rebalance.protocols leaves it out."""
        if "consumer" in self.config.group_coordinator_rebalance_protocols:
            return frozenset()
        return frozenset({68, 69})

    def _bind(self) -> None:
        """Every Kafka listener's sockets, bound and listening, before anything else starts: an
        address in use stops the broker with one line (ListenerBindError) before it touches its data.
        Connections wait in the listen queue until the acceptors start, when the broker serves."""
        for listener in self.config.listeners:
            security = self.security[listener.name]
            sockets = bind(f"listener {listener}", listener.host or "0.0.0.0", listener.port, backlog=1024)
            # Each connection knows its listener: clients are told that listener's addresses.
            # TLS listeners: the event loop's TLS (OpenSSL through the ssl module) wraps the socket;
            # the connection sees plain frames once the handshake is done.
            self._acceptors.append(Acceptor(
                listener, sockets, self.connection_limits,
                functools.partial(KafkaConnection, self, listener.name), security.ssl_context,
                10.0 if security.uses_tls else None))

    def kafka_listeners_serving(self) -> bool:
        """Every Kafka listener accepts connections (the broker has started and not begun to stop)."""
        return bool(self._acceptors) and all(a.serving for a in self._acceptors)

    def _unbind(self) -> None:
        for acceptor in self._acceptors:
            acceptor.close()

    async def start(self) -> None:
        try:
            self._bind()
            for service in self.services:
                await service.start()  # the admin listener binds its own sockets (the same error)
        except ListenerBindError:
            self._unbind()
            for service in reversed(self.services):
                await service.stop()
            raise
        loop = asyncio.get_running_loop()
        if self.cluster is not None:
            await self.cluster.connect()  # the metadata cache is loaded from ZooKeeper
        await self.acls.start()  # before the first request can come
        await self.quotas.start()
        await loop.run_in_executor(None, self.log_manager.startup)
        self.topics.reconcile()
        self.replica_manager.start()  # leads or follows every partition assigned here
        if self.cluster is not None:
            self.cluster.start_controller()
        # The coordinators write through the host (their PartitionWriter), with a copy of their settings.
        host = CoordinatorHost(self.replica_manager, self.log_manager, self.metadata, self.topics.ensure_internal,
                               self.spawn, one_node=self.cluster is None, live_brokers=self._live_brokers)
        self.group_coordinator = GroupCoordinatorRuntime(host, GroupRuntimeConfig.from_broker_config(self.config),
                                                         topics=self._topic_images)
        await self.group_coordinator.start()  # replays __consumer_offsets before serving
        self.txn_markers = TxnMarkers(host, self.cluster.store if self.cluster is not None else None,
                                      self.config.broker_id, self.config.inter_broker_listener_name,
                                      self.group_coordinator.on_txn_marker)
        self.txn_coordinator = TransactionCoordinatorRuntime(host, TxnRuntimeConfig.from_broker_config(self.config),
                                                             self.txn_markers.write_markers,
                                                             self.metadata.allocate_producer_id)
        await self.txn_coordinator.start()  # replays __transaction_state, resumes unfinished commits
        share_coordinator = self._start_share_groups(host)
        await share_coordinator.start()  # replays __share_group_state before serving
        await self.maintenance.start()  # after the replay, which reads logs from threads
        for acceptor in self._acceptors:
            acceptor.start()
        self.advertised = {name: BrokerInfo(self.config.broker_id, host, port, self.config.broker_rack)
                           for name, host, port in self._bound_endpoints()}
        self.node = next(iter(self.advertised.values()))
        if self.cluster is not None:
            await self.cluster.register(self._bound_endpoints(), self.schema_registry_urls)  # joins: the controller sees it now
        self.spawn(self._flush_loop())
        self.spawn(self._checkpoint_loop())
        self.serving.set()
        ports = ",".join(str(a.port) for a in self._acceptors)
        log.info("strom broker %d ready: listening on %s (port %s), log.dirs=%s",
                 self.config.broker_id, ",".join(self._describe(lst) for lst in self.config.listeners),
                 ports, ",".join(str(d) for d in self.config.log_dirs))

    def _start_share_groups(self, host: CoordinatorHost) -> ShareCoordinatorRuntime:
        """The share coordinator (share partitions' state in __share_group_state) and the share
        partition manager of the partitions this broker leads; members that leave or expire give
        back what they hold."""
        config = self.config
        self.share_coordinator = ShareCoordinatorRuntime(host, ShareRuntimeConfig(
            share_runtime_topic(config), config.share_coordinator_snapshot_update_records_per_snapshot,
            config.share_coordinator_write_timeout_ms))
        persister: LocalPersister | ClusterPersister = LocalPersister(self.share_coordinator)
        self.share_end_offsets = PartitionEndOffsets(self.replica_manager, None, config.broker_id, None)
        if self.cluster is not None:
            # The state of a share partition is kept by the share coordinator of its key, on
            # whichever broker leads that key's partition of __share_group_state.
            persister = ClusterPersister(
                self.share_coordinator, self.cluster.store, config.broker_id, config.inter_broker_listener_name,
                self.inter_broker_security)
            self.share_end_offsets = PartitionEndOffsets(self.replica_manager, self.cluster.store, config.broker_id,
                                                         persister.pool)
        self.share_persister = persister
        self.share_manager = SharePartitionManager(
            BrokerShareHost(self.replica_manager, self.metadata, self.purgatory, self.spawn),
            persister,
            ShareSettings(config.group_share_record_lock_duration_ms, config.group_share_min_record_lock_duration_ms,
                          config.group_share_max_record_lock_duration_ms, config.group_share_delivery_count_limit,
                          config.group_share_partition_max_record_locks, config.group_share_max_share_sessions,
                          config.fetch_max_bytes),
            self.metadata.group_configs, now_ms)
        self.group_coordinator.share_member_removed.append(self.share_manager.release_member)
        return self.share_coordinator

    def _live_brokers(self) -> int:
        return len(self.cluster.store.brokers) if self.cluster is not None else 1

    def connection_closed(self, connection_id: int) -> None:
        """A client connection is gone: its share sessions close and release what they hold."""
        if self.share_manager is not None:
            self.share_manager.connection_closed(connection_id)

    def _describe(self, listener: Any) -> str:
        protocol = self.security[listener.name].protocol
        text = f"{listener.name}://{listener.host}:{listener.port}"
        return text if protocol == listener.name else f"{text} ({protocol})"

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = -1) -> tuple[PartitionLog | None, int, int]:
        """(log, error, leader epoch) of a partition this broker leads; (None, Kafka's error, -1)
        when it does not (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, a fenced epoch)."""
        return self.replica_manager.leader_log(topic, partition, current_leader_epoch)

    def node_for(self, listener: str) -> BrokerInfo:
        """This broker as a client on ``listener`` reaches it (the first advertised listener when
        that one is not advertised)."""
        return self.advertised.get(listener, self.node)

    def _bound_endpoints(self) -> list[tuple[str, str, int]]:
        """(listener name, advertised host, port) with ports chosen by the OS filled in."""
        bound = {a.listener.name: a.port for a in self._acceptors}
        advertised = self.config.advertised_listeners or self.config.listeners
        return [(a.name, a.host or "127.0.0.1", a.port or bound.get(a.name, a.port)) for a in advertised]

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _flush_loop(self) -> None:
        """Timed flush (log.flush.interval.ms / flush.ms) and the flush after a segment roll, of
        the logs that changed since (the log manager keeps them); fsync runs in a thread."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0.2)
            for plog in self.log_manager.logs_to_flush(time.monotonic()):
                await loop.run_in_executor(None, plog.flush)

    async def _checkpoint_loop(self) -> None:
        """Recovery points and log start offsets to their checkpoint files, every
        log.flush.offset.checkpoint.interval.ms / log.flush.start.offset.checkpoint.interval.ms
        (Kafka's default: a minute; the files are written together, at the shorter interval)."""
        loop = asyncio.get_running_loop()
        config = self.config
        interval_ms = min(config.log_flush_offset_checkpoint_interval_ms,
                          config.log_flush_start_offset_checkpoint_interval_ms)
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            await loop.run_in_executor(None, self.log_manager.checkpoint)

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        # Before start: a SIGTERM that comes as soon as the broker says it is ready stops it cleanly.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        await self.start()
        await self._stopping.wait()
        await self.stop()

    def request_stop(self) -> None:
        self._stopping.set()

    async def stop(self) -> None:
        log.info("strom broker %d shutting down", self.config.broker_id)
        if self.cluster is not None:
            await self.cluster.shutdown()  # leaves the cluster first: leaders move
        await self.replica_manager.stop()  # fetchers stop
        self._unbind()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await self.txn_coordinator.stop()
        if self.share_manager is not None:
            self.share_manager.stop()
        if self.share_persister is not None:
            self.share_persister.close()
        if self.share_coordinator is not None:
            await self.share_coordinator.stop()
        await self.group_coordinator.stop()
        await self.maintenance.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        for service in reversed(self.services):
            await service.stop()
        log.info("strom broker %d stopped cleanly", self.config.broker_id)


def run_broker(config: BrokerConfig, setup: Any = None) -> None:
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    from strom.config import ConfigError

    zk_errors: tuple[type[Exception], ...] = ()
    if config.zookeeper_connect:  # kazoo only for a broker of a cluster (~50 ms of a broker's start)
        from strom.cluster.zk_store import ZooKeeperUnavailable

        zk_errors = (ZooKeeperUnavailable,)
    try:
        broker = Broker(config)
        if setup is not None:
            setup(broker)  # e.g. strom.admin.server.attach: layers above the broker add their services
    except ConfigError as e:
        print(f"strom: {e}", file=sys.stderr, flush=True)  # one line naming the key, as for a bad file
        raise SystemExit(2) from None
    try:
        runner(broker.serve_forever())
    except ListenerBindError as e:
        print(f"strom: {e}", file=sys.stderr, flush=True)  # one line naming the listener and the port
        raise SystemExit(1) from None
    except zk_errors as e:
        log.error("zookeeper.connect: %s", e)
        raise SystemExit(2) from None
