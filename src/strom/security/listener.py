"""What each listener demands of its clients, built once at start from the configuration:
its security protocol, TLS context, SASL mechanisms and PLAIN users. Everything is checked here,
so a setting that cannot be honoured stops the broker with one line naming the key."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from strom.config import BrokerConfig, ConfigError
from strom.security import jaas, tls
from strom.security.listener_config import ListenerConfig
from strom.security.principal import SslPrincipalMapper
from strom.security.sasl_server import PLAIN, SCRAM_MECHANISMS, SUPPORTED_MECHANISMS

# Kafka settings that plug in Java classes; strom has no such plug-ins and says so.
UNSUPPORTED_KEYS = ("principal.builder.class", "sasl.server.callback.handler.class", "ssl.engine.factory.class",
                    "sasl.login.class", "sasl.login.callback.handler.class", "security.providers")


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    principal_mapper: SslPrincipalMapper | None = None  # SSL listeners: certificate -> user name
    reauth_ms: int = 0  # connections.max.reauth.ms
    max_receive: int = 524288  # sasl.server.max.receive.size

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def build(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    """Listener name -> its security; raises ConfigError for anything that cannot be honoured."""
    for key in config.raw:
        base = key.split(".", 3)[3] if key.startswith("listener.name.") and key.count(".") >= 3 else key
        if base in UNSUPPORTED_KEYS:
            raise ConfigError(key, "custom Java classes are not supported by strom")
    for key in ("zookeeper.ssl.client.enable", "zookeeper.set.acl"):
        if config.raw.get(key, "false").strip().lower() == "true":
            # Asked for a secured ZooKeeper connection: strom's is plain TCP without ACLs.
            raise ConfigError(key, "TLS and ACLs on the ZooKeeper connection are not built in strom yet")
    out = {}
    for listener in config.listeners:
        protocol = config.listener_security_protocol_map[listener.name]
        out[listener.name] = _listener(config, listener.name, protocol)
    return out


def _listener(config: BrokerConfig, name: str, protocol: str) -> ListenerSecurity:
    lc = ListenerConfig(config, name)
    context = mapper = None
    if protocol in ("SSL", "SASL_SSL"):
        context = tls.server_context(lc)
        try:
            mapper = SslPrincipalMapper(lc.get("ssl.principal.mapping.rules") or "DEFAULT")
        except ValueError as e:
            raise ConfigError(lc.key("ssl.principal.mapping.rules"), str(e)) from None
    if not protocol.startswith("SASL_"):
        return ListenerSecurity(name, protocol, context, principal_mapper=mapper)
    mechanisms = tuple(m.upper() for m in lc.get_list("sasl.enabled.mechanisms"))
    key = lc.key("sasl.enabled.mechanisms")
    if not mechanisms:
        raise ConfigError(key, f"listener {name} uses {protocol} but no SASL mechanism is enabled")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise ConfigError(key, f"{','.join(unsupported)} not supported on listener {name}: "
                          f"strom offers {', '.join(SUPPORTED_MECHANISMS)}")
    users: dict[str, str] = {}
    if PLAIN in mechanisms:
        entry = jaas_entry(lc, PLAIN)
        if entry is None:
            raise ConfigError(f"listener.name.{name.lower()}.plain.sasl.jaas.config",
                              f"PLAIN is enabled on listener {name} but no JAAS configuration names its users")
        users = entry.plain_users()
    for m in mechanisms:
        if m in SCRAM_MECHANISMS:
            jaas_entry(lc, m, fallback=False)  # checked if given (the broker's login, inter-broker)
    # Per listener too, as in Kafka (listener.name.<l>.connections.max.reauth.ms).
    reauth = _int_setting(lc, "connections.max.reauth.ms", 0)
    max_receive = _int_setting(lc, "sasl.server.max.receive.size", 1)
    return ListenerSecurity(name, protocol, context, mechanisms, users, None, reauth, max_receive)


def _int_setting(lc: ListenerConfig, name: str, minimum: int) -> int:
    text = (lc.get(name) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(lc.key(name), f"'{text}' is not a whole number") from None
    if value < minimum:
        raise ConfigError(lc.key(name), f"must be at least {minimum}")
    return value


_LOGIN_MODULES = {PLAIN: jaas.PLAIN_LOGIN_MODULE, **{m: jaas.SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS}}


def jaas_entry(lc: ListenerConfig, mechanism: str, fallback: bool = True) -> jaas.JaasEntry | None:
    """The JAAS configuration for ``mechanism`` on this listener, if given:
    ``listener.name.<l>.<mechanism>.sasl.jaas.config``, else (``fallback``) ``sasl.jaas.config``."""
    own = f"{mechanism.lower()}.sasl.jaas.config"
    key = lc.key(own)
    if key == own:  # not set for this listener
        if not fallback or not lc.config.raw.get("sasl.jaas.config"):
            return None
        key = "sasl.jaas.config"
    text = lc.get(own) if key != "sasl.jaas.config" else lc.config.raw[key]
    try:
        entry = jaas.parse(text or "")
    except jaas.JaasError as e:
        raise ConfigError(key, str(e)) from None
    if entry.login_module != _LOGIN_MODULES[mechanism]:
        raise ConfigError(key, f"{mechanism} needs {_LOGIN_MODULES[mechanism]}, not {entry.login_module}")
    return entry
