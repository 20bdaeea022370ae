"""The admin HTTP server: /metrics, /healthz, /readyz, the REST API and the web console.

It runs as an aiohttp application in the broker's own event loop (no second process, no thread), on
every ``admin.listeners`` address. It starts before the logs load, so supervisors see /healthz at
once and /readyz turn 200 when the broker serves Kafka clients. An address that cannot be bound
stops the broker with one line naming the listener and the port, as for a Kafka listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections import deque
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from strom.admin import api, schemas, snapshot
from strom.admin.collector import make_registry
from strom.admin.hosts import AllowedHosts
from strom.admin.login import AdminLogin
from strom.admin.login import middleware as login_middleware
from strom.admin.view import ReplicationState
from strom.broker.acceptor import bind
from strom.broker.handlers.metadata import brokers_and_controller, topic_entry
from strom.http_listeners import bind_all
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from strom.admin.view import GroupReader, LogReader, TopicReader, TxnReader
    from strom.broker.metrics import BrokerMetrics
    from strom.broker.server import Broker
    from strom.cluster.metadata import BrokerInfo, TopicInfo
    from strom.config import BrokerConfig
    from strom.config.broker import Listener
    from strom.coordinator.group_runtime import GroupCoordinatorRuntime
    from strom.coordinator.txn_runtime import TransactionCoordinatorRuntime
    from strom.storage.log import PartitionLog

log = logging.getLogger("strom.admin")

STATIC_DIR = resources.files("strom.admin") / "static"
MAX_BODY_BYTES = 64 * 1024
SAMPLE_INTERVAL_S = 2.0
SAMPLES_KEPT = 151  # five minutes of throughput history for the console's charts


def _url(host: str, port: int, scheme: str = "http") -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


@web.middleware
async def _guard(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Changes only from the console's own origin, with a JSON body (no cross-site form posts)."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            return web.json_response({"error": "cross-origin request refused"}, status=403)
        if request.method == "POST" and request.content_type != "application/json":
            return web.json_response({"error": "send application/json"}, status=415)
    return await handler(request)


class BrokerAdminView:
    """The BrokerView (admin/view.py) of a strom Broker: the one place where what the admin pages
    read meets the Broker's attributes."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def config(self) -> BrokerConfig:
        return self._broker.config  # read each time: dynamic configs replace it

    @property
    def metadata(self) -> TopicReader:
        return self._broker.metadata

    @property
    def log_manager(self) -> LogReader:
        return self._broker.log_manager

    @property
    def metrics(self) -> BrokerMetrics:
        return self._broker.metrics

    @property
    def node(self) -> BrokerInfo:
        return self._broker.node

    @property
    def started(self) -> bool:
        return bool(self._broker.advertised)

    def kafka_listeners_serving(self) -> bool:
        return self._broker.kafka_listeners_serving()

    def connection_count(self) -> int:
        return len(self._broker.connections)

    def handler_names(self) -> dict[int, str]:
        return {key: h.name for key, h in self._broker.handlers.items()}

    def group_coordinator(self) -> GroupReader | None:
        coordinator: GroupCoordinatorRuntime | None = getattr(self._broker, "group_coordinator", None)
        return coordinator  # made when the broker starts

    def txn_coordinator(self) -> TxnReader | None:
        coordinator: TransactionCoordinatorRuntime | None = getattr(self._broker, "txn_coordinator", None)
        return coordinator

    def share_offsets(self, group_id: str) -> list[dict[str, Any]]:
        """Start offset, high watermark and lag of each share partition a share group has state
        for, as far as this broker knows them at once (the console does not wait on other
        brokers): the state where this broker is its share coordinator, the high watermark where
        it leads the partition; None where not."""
        coordinator: GroupCoordinatorRuntime | None = getattr(self._broker, "group_coordinator", None)
        state = self._broker.share_coordinator
        if coordinator is None:
            return []
        out = []
        for topic_id, parts in (coordinator.share_initialized(group_id) or {}).items():
            info = self._broker.metadata.topic_by_id(topic_id)
            if info is None:
                continue
            for p in sorted(parts):
                error, summary = state.read_summary(group_id, topic_id, p) if state is not None else (None, None)
                plog = self._broker.leader_log(info.name, p)[0]
                start = summary.start_offset if summary is not None and summary.start_offset >= 0 else None
                lag = None
                if start is not None and summary is not None and plog is not None:
                    lag = max(0, plog.high_watermark - start - summary.delivery_complete_count)
                out.append({"topic": info.name, "partition": p, "committed": start,
                            "end_offset": plog.high_watermark if plog is not None else None,
                            "lag": lag, "metadata": ""})
        return sorted(out, key=lambda o: (o["topic"], o["partition"]))

    def metadata_partitions(self, topic: TopicInfo) -> list[dict[str, Any]]:
        partitions: list[dict[str, Any]] = topic_entry(self._broker, topic)["partitions"]
        return partitions

    def brokers_and_controller(self) -> tuple[list[dict[str, Any]], int]:
        return brokers_and_controller(self._broker)

    def leader_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._broker.leader_log(topic, partition)[0]

    def replication(self) -> ReplicationState:
        rm = self._broker.replica_manager
        cluster = self._broker.cluster
        controller = cluster.controller if cluster is not None else None
        lags = []
        for part in sorted(rm.partitions.values(), key=lambda p: p.key):
            if not part.is_leader:
                continue
            end = part.log.log_end_offset
            for replica, follower in sorted(part.followers.items()):
                if follower.log_end_offset >= 0:  # unknown until the follower's first fetch here
                    lags.append((part.topic, part.partition, replica, max(0, end - follower.log_end_offset)))
        return ReplicationState(
            partitions=len(rm.partitions), leaders=rm.led(), under_replicated=rm.under_replicated(),
            isr_shrinks=rm.isr_shrinks, isr_expands=rm.isr_expands,
            # A broker on its own is its own controller.
            active_controller=cluster is None or (controller is not None and controller.active),
            one_node=cluster is None, follower_lags=lags)


class AdminServer:
    """One broker's admin listeners; ``start``/``stop`` are called by the broker's lifecycle."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.view = BrokerAdminView(broker)
        self.registry = make_registry(self.view)
        self.addresses: list[str] = []
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.history: deque[list[float]] = deque(maxlen=SAMPLES_KEPT)
        self.login = AdminLogin(broker)
        # The broker's schema registry, for the schemas page: set when the broker serves one.
        self.schema_reader: schemas.SchemaReader | None = None
        # https:// admin listeners: the ssl.* settings, per listener as listener.name.admin.ssl.*
        # (a missing or bad key stops the broker with one line naming it, as for Kafka listeners).
        self.tls = None
        if any(lst.name == "HTTPS" for lst in broker.config.admin_listeners):
            from strom.security.listener_config import ListenerConfig
            from strom.security.tls import server_context

            self.tls = server_context(ListenerConfig(broker.config, "admin"))
        # First the Host header (DNS rebinding), then the login, then the checks on changes.
        self.hosts = AllowedHosts(broker.config)
        app = web.Application(middlewares=[self.hosts.middleware(), login_middleware(self.login), _guard],
                              client_max_size=MAX_BODY_BYTES)
        app[api.BROKER_KEY] = broker
        app[api.VIEW_KEY] = self.view
        app[api.HISTORY_KEY] = self.history
        # Every topic and group by name: for whoever may see the overview (a login when the broker has
        # one; with an authorizer, Describe on the cluster).
        app.router.add_get("/metrics", api.endpoint(ready=False, acl=(AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                                                      None))(self.metrics))
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        api.add_routes(app)
        schemas.add_routes(app, lambda: self.schema_reader)
        app.router.add_get("/", self.index)
        app.router.add_static("/static/", str(STATIC_DIR), append_version=False)
        self.app = app

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        listeners = self.broker.config.admin_listeners
        if not listeners:
            log.info("admin listener disabled (admin.listeners is empty)")
            return
        bound = bind_all(listeners, functools.partial(bind, backlog=128), "admin listener")
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        for listener, sockets in bound:
            for sock in sockets:
                await self._serve(runner, listener, sock)
        self._sampler = asyncio.ensure_future(self._sample())

    async def _sample(self) -> None:
        """Every SAMPLE_INTERVAL_S: [time, bytes in, bytes out, records in, records out] totals."""
        while True:
            self.history.append([time.time(), *snapshot.totals(self.view)])
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    async def _serve(self, runner: web.AppRunner, listener: Listener, sock: socket.socket) -> None:
        tls = self.tls if listener.name == "HTTPS" else None
        site = web.SockSite(runner, sock, ssl_context=tls)
        await site.start()
        host, port = sock.getsockname()[:2]
        url = _url(host, port, "https" if tls is not None else "http")
        self.addresses.append(url)
        log.info("admin listener ready on %s (metrics %s/metrics, console %s/)", url, url, url)

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.login.close()

    # ------------------------------------------------------------------ endpoints

    async def metrics(self, request: web.Request, broker: Broker) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: the process and its event loop answer."""
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        """Readiness: logs loaded, groups replayed, Kafka listeners serving."""
        ready, reason = snapshot.is_ready(self.view)
        return web.Response(text=reason + "\n", status=200 if ready else 503)

    async def index(self, request: web.Request) -> web.Response:
        html = (STATIC_DIR / "index.html").read_bytes()
        return web.Response(body=html, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-cache"})


def attach(broker: Any) -> AdminServer:
    """Give a broker its admin server (started first and stopped last with the broker)."""
    server = AdminServer(broker)
    broker.services.append(server)
    return server
