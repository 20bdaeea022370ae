"""ClusterNode: what a broker started with ``zookeeper.connect`` adds to itself.

It holds the ZooKeeper metadata store (the broker's ``metadata``, built by broker/server.py) and this
broker's candidacy for controller, and runs the steps of joining and leaving the cluster in order:
connect and load the cache (the replica manager then takes up the partitions assigned here), start
the controller candidacy, register (the controller then counts this broker live), and on SIGTERM a
controlled shutdown: ask the cluster to move the leaderships away, wait for that (bounded), then
deregister.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.config_admin import load_persisted
from strom.cluster.controller import Controller
from strom.cluster.metadata import ClusterEvent
from strom.cluster.zk_credentials import ZkCredentialStore
from strom.cluster.zk_layout import BrokerRegistration
from strom.cluster.zk_store import ZkMetadataStore

if TYPE_CHECKING:
    from strom.cluster.metadata import TopicInfo
    from strom.config import BrokerConfig, LiveConfig
    from strom.replication.partition import Partition
    from strom.storage.log import LogConfig

log = logging.getLogger("strom.cluster")


class LedPartitions(Protocol):
    """What a controlled shutdown watches of the replica manager: the partitions led here."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...
    def led(self) -> int: ...


def zookeeper_stores(config: BrokerConfig) -> tuple[ZkMetadataStore, ZkCredentialStore]:
    """The cluster metadata and the SCRAM users (cluster-wide), both in ZooKeeper."""
    assert config.zookeeper_connect is not None
    store = ZkMetadataStore(config.zookeeper_connect, config.zookeeper_session_timeout_ms,
                            config.zookeeper_connection_timeout_ms, config.broker_id)
    return store, ZkCredentialStore(store.zk)


class ClusterNode:
    def __init__(self, store: ZkMetadataStore, credentials: ZkCredentialStore, config: LiveConfig,
                 replicas: LedPartitions, apply_broker_config: Callable[[BrokerConfig], None],
                 topic_log_config: Callable[[TopicInfo], LogConfig],
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]]) -> None:
        """``apply_broker_config`` takes new dynamic broker configs (ConfigAdmin's);
        ``topic_log_config`` is a topic's log config (for unclean.leader.election.enable)."""
        self.store = store
        self.credentials = credentials
        self._config = config
        self._replicas = replicas
        self._apply_broker_config = apply_broker_config
        self._topic_log_config = topic_log_config
        self._spawn = spawn
        self.controller: Controller | None = None

    async def connect(self) -> None:
        await self.store.run(self.store.connect, asyncio.get_running_loop())
        await self.store.run(self.credentials.start)
        await asyncio.sleep(0)  # the cache updates queued by the first watches are applied now
        # Dynamic broker configs live in ZooKeeper (/config/brokers).
        self._config.replace(load_persisted(self._config.value, self.store))
        self.store.listeners.append(self._on_event)
        log.info("connected to ZooKeeper at %s (cluster id %s)", self.store.connect_string, self.store.cluster_id)

    def start_controller(self) -> None:
        cfg = self._config.value
        self.controller = Controller(self.store, cfg.broker_id, self._unclean_allowed, self._spawn)
        self.controller.auto_rebalance = cfg.auto_leader_rebalance_enable
        self.controller.rebalance_interval_s = float(str(cfg.get("leader.imbalance.check.interval.seconds")))
        self.controller.imbalance_percentage = int(str(cfg.get("leader.imbalance.per.broker.percentage")))

    def _unclean_allowed(self, topic: str) -> bool:
        info = self.store.get_topic(topic)
        if info is None:
            return False
        return self._topic_log_config(info).unclean_leader_election_enable

    async def register(self, endpoints: list[tuple[str, str, int]], schema_registry: Sequence[str] = ()) -> None:
        cfg = self._config.value
        name, host, port = next(((n, h, p) for n, h, p in endpoints if n == cfg.inter_broker_listener_name),
                                endpoints[0])
        protocols = dict(cfg.listener_security_protocol_map)
        reg = BrokerRegistration(cfg.broker_id, host, port, cfg.broker_rack,
                                 tuple(f"{n}://{h}:{p}" for n, h, p in endpoints),
                                 {n: protocols.get(n, n) for n, _, _ in endpoints},
                                 schema_registry=tuple(schema_registry))
        await self.store.run(self.store.register_broker, reg, cfg.zookeeper_session_timeout_ms / 1000 + 10)
        log.info("registered broker %d in ZooKeeper as %s", cfg.broker_id, list(reg.endpoints))
        assert self.controller is not None
        if self.store.controller_id == -1:
            await self.controller.elect()

    async def _controlled_shutdown(self, timeout_s: float = 15.0) -> None:
        """Ask the controller to move this broker's leaderships, and serve until they have moved
        (or the time is up): clients see NOT_LEADER_OR_FOLLOWER and move on, nothing times out."""
        replicas = self._replicas
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(self.store.run(self.store.request_controlled_shutdown), 5)
        except Exception as e:
            log.warning("controlled shutdown: could not reach ZooKeeper (%s); stopping anyway", e)
            return

        def movable() -> list[str]:
            # Led partitions that another live in-sync replica could take over.
            live = set(self.store.brokers) - {self._config.value.broker_id}
            return [f"{p.topic}-{p.partition}" for p in replicas.partitions.values()
                    if p.is_leader and any(b in live for b in p.isr if b != p.broker_id)]

        led = replicas.led()
        while (left := movable()) and asyncio.get_running_loop().time() - started < timeout_s:
            await asyncio.sleep(0.02)
        took = asyncio.get_running_loop().time() - started
        still = replicas.led()
        if left:
            log.warning("controlled shutdown: %d of %d leaderships moved, %d not moved after %.1f s: %s",
                        led - still, led, len(left), took, left[:10])
        else:
            log.info("controlled shutdown: %d of %d leaderships moved in %.0f ms, none left to move (%d still "
                     "led here: no other in-sync replica)", led - still, led, took * 1000, still)

    def _on_event(self, event: ClusterEvent) -> None:
        if event.kind == "broker_config":
            self._apply_broker_configs()
        if event.kind == "session":
            # A new session: our registration vanished with the old one. Register again; we come
            # back as a follower (the controller moved our leaderships when we disappeared).
            self._spawn(self._reregister())

    def _apply_broker_configs(self) -> None:
        """Dynamic broker configs changed in ZooKeeper (by any broker): take the new layers."""
        from strom.config import ConfigError
        from strom.config.dynamic import with_dynamic_configs

        current = self._config.value
        try:
            new = with_dynamic_configs(current, self.store.broker_configs(""),
                                       self.store.broker_configs(str(current.broker_id)))
        except ConfigError as e:
            log.warning("ignoring dynamic broker configs from ZooKeeper: %s", e)
            return
        if new != current:
            self._apply_broker_config(new)
            log.info("dynamic broker configs from ZooKeeper applied")

    async def _reregister(self) -> None:
        try:
            await self.store.run(self.store.reregister)
            log.info("registered again in ZooKeeper after the session expired")
        except Exception as e:
            log.error("could not register again in ZooKeeper: %s", e)

    async def shutdown(self) -> None:
        store = self.store
        if self._config.value.controlled_shutdown_enable and self.controller is not None:
            await self._controlled_shutdown()
        try:
            await asyncio.wait_for(store.run(store.deregister), 5)
        except Exception as e:
            log.warning("could not deregister from ZooKeeper: %s", e)
        if self.controller is not None:
            await self.controller.stop()
        await store.run(store.close)
