"""The schema registry's listeners (schema.registry.listeners), wired into the broker beside the
admin listener and guarded the same way: the Host check (admin.allowed.hosts), the broker's SASL
users over HTTP Basic, and TLS for https:// listeners from the ssl.* settings (per listener as
listener.name.registry.ssl.*). The registry itself (strom.registry) sees none of the broker: it
gets the ``_schemas`` log through BrokerSchemaLog."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from strom.admin.hosts import AllowedHosts
from strom.admin.login import AdminLogin
from strom.admin.login import middleware as login_middleware
from strom.broker.acceptor import bind
from strom.broker.schema_log import BrokerSchemaLog
from strom.registry.server import RegistryServer
from strom.registry.store import SchemaLogError

if TYPE_CHECKING:
    from strom.broker.server import Broker


class _Service:
    """start()/stop() with the broker: the registry's server, and the login's threads after it.
    Once bound, its URLs go into the broker's registration (where other brokers forward writes)."""

    def __init__(self, server: RegistryServer, login: AdminLogin, broker: Broker) -> None:
        self.server = server
        self.login = login
        self.broker = broker

    async def start(self) -> None:
        await self.server.start()
        self.broker.schema_registry_urls = [_reachable(url, _broker_host(self.broker)) for url in self.server.addresses]

    async def stop(self) -> None:
        await self.server.stop()
        self.login.close()


def attach(broker: Broker) -> RegistryServer:
    config = broker.config
    listeners = config.schema_registry_listeners
    tls = client_tls = None
    if any(lst.name == "HTTPS" for lst in listeners):
        from strom.security.listener_config import ListenerConfig
        from strom.security.tls import client_context, server_context

        tls = server_context(ListenerConfig(config, "registry"))
        client_tls = client_context(ListenerConfig(config, "registry"))
    hosts = AllowedHosts(config, listeners, "schema registry listener")
    login = AdminLogin(broker)

    def live_brokers() -> int:
        return len(broker.cluster.store.brokers) if broker.cluster is not None else 1

    schema_log = BrokerSchemaLog(broker.replica_manager, broker.log_manager, broker.topics, broker.metadata,
                                 broker.serving, live_brokers, error=SchemaLogError)
    server = RegistryServer(listeners, schema_log, functools.partial(bind, backlog=128), tls,
                            [hosts.middleware(), login_middleware(login)], client_tls)
    broker.services.append(_Service(server, login, broker))
    return server


def _broker_host(broker: Broker) -> str:
    """The host other brokers reach this one at: its inter-broker listener's advertised host."""
    config = broker.config
    advertised = config.advertised_listeners or config.listeners
    own = next((a for a in advertised if a.name == config.inter_broker_listener_name), None) or advertised[0]
    return own.host or "127.0.0.1"


def _reachable(url: str, host: str) -> str:
    """A listener's URL with a wildcard address (0.0.0.0, ::) replaced by the broker's host."""
    scheme, _, rest = url.partition("://")
    bound, _, port = rest.rpartition(":")
    if bound.strip("[]") in ("0.0.0.0", "::", ""):
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}"
    return url
