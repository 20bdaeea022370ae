"""Broker configuration: read server.properties + overrides into a typed, validated BrokerConfig."""

from __future__ import annotations

import dataclasses
import logging
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import javaproperties

from strom.security.acl import ACL_AUTHORIZERS, valid_principal

from ._defs import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    Value,
    format_value,
    no_effect_warnings,
    snake,
)
from .definitions import (
    BROKER_CONFIGS,
    BROKER_DEFS,
    DYNAMIC_BROKER_CONFIGS,
    KAFKA_ONLY_REFUSALS,
    KNOWN_PREFIXES,
    SECURITY_PROTOCOLS,
)

log = logging.getLogger("strom.config")

_MS_PER_MINUTE = 60 * 1000
_MS_PER_HOUR = 60 * _MS_PER_MINUTE

# Kafka's listener pattern (CoreUtils.listenerListToEndPoints): NAME://host:port, IPv6 in brackets.
_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")
_NAME_RE = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Listener:
    """One endpoint of `listeners`, `advertised.listeners` or `admin.listeners`."""

    name: str  # upper-cased, as Kafka's ListenerName.normalised
    host: str  # "" = all interfaces (Kafka's null host)
    port: int  # 0 = any free port

    @property
    def bind_host(self) -> str | None:
        """Host for asyncio's create_server: None binds every interface, like Kafka's empty host."""
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(key: str, text: str) -> list[Listener]:
    """Parse a comma-separated listener list; names and ports must be unique (port 0 aside)."""
    out: list[Listener] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if m is None:
            raise ConfigError(key, f"'{item}' is not of the form NAME://host:port")
        name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
        if not _NAME_RE.fullmatch(name):
            raise ConfigError(key, f"'{item}' has an invalid listener name '{m.group(1)}'")
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ConfigError(key, f"'{item}' has port {port}, which is not in 0..65535")
        out.append(Listener(name, host, port))
    names = [ls.name for ls in out]
    for n in names:
        if names.count(n) > 1:
            raise ConfigError(key, f"each listener must have a different name; {n} is used twice")
    ports = [ls.port for ls in out if ls.port != 0]
    for p in ports:
        if ports.count(p) > 1:
            raise ConfigError(key, f"each listener must have a different port; {p} is used twice")
    return out


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java .properties file (comments, ':' / '=' / space separators, continuations, escapes).

    Java reads these files as ISO-8859-1; UTF-8 is tried first because that is what editors write,
    and the two agree on ASCII.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read file: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        props: dict[str, str] = javaproperties.loads(text)
    except ValueError as e:  # bad \uXXXX escape
        raise ConfigError(str(path), f"cannot parse file: {e}") from None
    return props


def parse_overrides(overrides: Sequence[str] | Mapping[str, str]) -> dict[str, str]:
    """`key=value` strings (like kafka-server-start's --override) or a mapping, into a dict."""
    if isinstance(overrides, Mapping):
        return {str(k).strip(): str(v) for k, v in overrides.items()}
    if isinstance(overrides, str):  # a lone string would otherwise be read letter by letter
        overrides = [overrides]
    out: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(item, "override must be of the form key=value")
        out[key] = value
    return out


# Attributes computed from several properties (or parsed further) rather than read from one.
_DERIVED = frozenset(
    {
        "broker_id",
        "listeners",
        "advertised_listeners",
        "listener_security_protocol_map",
        "inter_broker_listener_name",
        "admin_listeners",
        "admin_allowed_hosts",
        "schema_registry_listeners",
        "max_connections_per_ip_overrides",
        "log_dirs",
        "log_roll_ms",
        "log_roll_jitter_ms",
        "log_retention_ms",
        "zookeeper_connection_timeout_ms",
        "super_users",
        "raw",
        "_values",
        "dynamic_default",
        "dynamic_broker",
        "static_raw",
    }
)
_BY_ATTRIBUTE = {snake(d.name): d.name for d in BROKER_CONFIGS}


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's configuration, validated. Build it with BrokerConfig.load().

    Attribute names are Kafka's property names in snake_case; values are effective (precedence
    applied: log.dirs over log.dir, log.roll.ms over log.roll.hours, log.retention.ms over
    .minutes over .hours). Anything in the table without an attribute is reachable through get().
    """

    # identity and listeners
    broker_id: int
    listeners: list[Listener]
    advertised_listeners: list[Listener]
    listener_security_protocol_map: dict[str, str]
    inter_broker_listener_name: str | None
    security_inter_broker_protocol: str
    admin_listeners: list[Listener]
    admin_allowed_hosts: list[str]  # lower case, without a trailing dot
    schema_registry_listeners: list[Listener]
    broker_rack: str | None
    # storage
    log_dirs: list[Path]
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    num_recovery_threads_per_data_dir: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_jitter_ms: int
    log_index_size_max_bytes: int
    log_index_interval_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int | None  # None: fall back to log_flush_scheduler_interval_ms
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_retention_ms: int  # -1 = unlimited
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_segment_delete_delay_ms: int
    log_cleanup_policy: list[str]
    log_message_timestamp_type: str
    log_message_timestamp_difference_max_ms: int
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    message_max_bytes: int
    compression_type: str
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    # log cleaner
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_delete_retention_ms: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int
    # network
    socket_request_max_bytes: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_listen_backlog_size: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: dict[str, int]  # host or address, as written -> its limit
    connection_failed_authentication_delay_ms: int
    fetch_max_bytes: int
    max_incremental_fetch_session_cache_slots: int
    # groups and offsets
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    group_consumer_session_timeout_ms: int
    group_consumer_min_session_timeout_ms: int
    group_consumer_max_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_consumer_min_heartbeat_interval_ms: int
    group_consumer_max_heartbeat_interval_ms: int
    group_consumer_max_size: int
    group_consumer_assignors: list[str]
    group_coordinator_rebalance_protocols: list[str]
    group_consumer_migration_policy: str
    group_share_session_timeout_ms: int
    group_share_min_session_timeout_ms: int
    group_share_max_session_timeout_ms: int
    group_share_heartbeat_interval_ms: int
    group_share_min_heartbeat_interval_ms: int
    group_share_max_heartbeat_interval_ms: int
    group_share_max_size: int
    group_share_record_lock_duration_ms: int
    group_share_min_record_lock_duration_ms: int
    group_share_max_record_lock_duration_ms: int
    group_share_delivery_count_limit: int
    group_share_partition_max_record_locks: int
    group_share_max_share_sessions: int
    share_coordinator_state_topic_num_partitions: int
    share_coordinator_state_topic_replication_factor: int
    share_coordinator_state_topic_min_isr: int
    share_coordinator_state_topic_segment_bytes: int
    share_coordinator_snapshot_update_records_per_snapshot: int
    share_coordinator_write_timeout_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    offsets_load_buffer_size: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offsets_commit_timeout_ms: int
    offset_metadata_max_bytes: int
    # transactions
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transactional_id_expiration_ms: int
    transaction_max_timeout_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    # replication and cluster
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_min_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_backoff_ms: int
    replica_fetch_response_max_bytes: int
    replica_socket_timeout_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int
    auto_leader_rebalance_enable: bool
    controlled_shutdown_enable: bool
    zookeeper_connect: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    # security
    ssl_keystore_type: str
    ssl_keystore_location: str | None
    ssl_keystore_password: str | None = field(repr=False)
    ssl_key_password: str | None = field(repr=False)
    ssl_keystore_certificate_chain: str | None = field(repr=False)
    ssl_keystore_key: str | None = field(repr=False)
    ssl_truststore_type: str
    ssl_truststore_location: str | None
    ssl_truststore_password: str | None = field(repr=False)
    ssl_truststore_certificates: str | None = field(repr=False)
    ssl_client_auth: str
    ssl_enabled_protocols: list[str]
    ssl_protocol: str
    ssl_endpoint_identification_algorithm: str
    ssl_cipher_suites: list[str]
    ssl_principal_mapping_rules: str
    connections_max_reauth_ms: int
    sasl_server_max_receive_size: int
    sasl_enabled_mechanisms: list[str]
    sasl_mechanism_inter_broker_protocol: str
    sasl_jaas_config: str | None = field(repr=False)
    authorizer_class_name: str
    super_users: list[str]
    allow_everyone_if_no_acl_found: bool
    # Properties set explicitly (file, then overrides on top), as written. May hold secrets.
    raw: dict[str, str] = field(repr=False)
    # Parsed value of every table entry, for get().
    _values: dict[str, Value] = field(repr=False, compare=False)
    # Dynamic broker configs (AlterConfigs on a BROKER resource), already merged into raw: the
    # cluster-wide defaults (resource name "") and this broker's own (resource name = broker.id),
    # and what server.properties and --override gave (None: raw is all static).
    dynamic_default: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    dynamic_broker: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    static_raw: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def load(
        cls,
        path: Path | str | None = None,
        overrides: Sequence[str] | Mapping[str, str] = (),
    ) -> BrokerConfig:
        """Read `path` (a server.properties; None = defaults only) and apply `key=value` overrides.

        Raises ConfigError (one line naming the key) for unreadable files, malformed overrides,
        values of the wrong type or out of range, and bad listener addresses. Unknown keys are
        accepted with a warning, as Kafka does, and kept in `raw`; a deprecated key that has no
        effect (log.message.format.version, ...) is accepted with one warning line naming it.
        """
        raw: dict[str, str] = {}
        if path is not None:
            raw.update(read_properties(Path(path)))
        raw.update(parse_overrides(overrides))
        config = cls._build(raw)
        for line in no_effect_warnings(raw, BROKER_DEFS, "broker"):
            log.warning("%s", line)
        return config

    @classmethod
    def defaults(cls) -> BrokerConfig:
        return cls._build({})

    @classmethod
    def _build(cls, raw: dict[str, str]) -> BrokerConfig:
        for key in raw:
            if key not in BROKER_DEFS and not key.startswith(KNOWN_PREFIXES):
                log.warning("The configuration '%s' was supplied but isn't a known config.", key)
        values: dict[str, Value] = {}
        for d in BROKER_DEFS.values():
            text = raw.get(d.name, d.default)
            values[d.name] = None if text is None else d.parse(text)
        for name, why in KAFKA_ONLY_REFUSALS.items():
            # A Kafka key strom has no feature for: only Kafka's default, which asks nothing of it.
            if name in raw and values[name] != BROKER_DEFS[name].parsed_default():
                raise ConfigError(name, f"value {raw[name].strip()!r} cannot be honoured: {why}")
        kwargs: dict[str, Any] = _derive(values, raw)
        for f in fields(cls):
            if f.name not in _DERIVED:
                kwargs[f.name] = values[_BY_ATTRIBUTE[f.name]]
        return cls(**kwargs)

    def get(self, name: str) -> Value:
        """Parsed value of any broker property in the table, by its Kafka name (None = null)."""
        if name not in BROKER_DEFS:
            raise KeyError(name)
        return self._values[name]

    def with_overrides(self, overrides: Sequence[str] | Mapping[str, str]) -> BrokerConfig:
        """A copy with more properties set (the same validation as load)."""
        return self._build({**self.raw, **parse_overrides(overrides)})

    def is_set(self, name: str) -> bool:
        """Whether the property was given explicitly (file, override or dynamic config)."""
        return name in self.raw

    def with_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        """The configuration with these dynamic broker configs over the static ones (replacing any
        dynamic configs this one had). Same validation as load; values are not checked for being
        dynamically updatable here (see DYNAMIC_BROKER_CONFIGS)."""
        static = self.static_raw if self.static_raw is not None else self.raw
        built = self._build({**static, **default, **broker})
        return dataclasses.replace(built, dynamic_default=dict(default), dynamic_broker=dict(broker),
                                   static_raw=dict(static))

    def layers(self, name: str) -> list[tuple[ConfigSource, str]]:
        """Where ``name`` is set, most specific first: (source, value as written)."""
        static = self.static_raw if self.static_raw is not None else self.raw
        out = []
        for source, layer in (
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
            (ConfigSource.STATIC_BROKER_CONFIG, static),
        ):
            if name in layer:
                out.append((source, layer[name]))
        return out

    def source_of(self, name: str) -> ConfigSource:
        """Where the effective value of ``name`` comes from."""
        found = self.layers(name)
        return found[0][0] if found else ConfigSource.DEFAULT_CONFIG

    def synonyms_of(self, name: str) -> list[ConfigSynonym]:
        """DescribeConfigs synonyms of a broker property: every level that sets it, then its default."""
        d = BROKER_DEFS[name]
        out = [
            ConfigSynonym(name, None if d.sensitive else format_value(d.parse(text)), source)
            for source, text in self.layers(name)
        ]
        default = format_value(d.parsed_default())
        if default is not None:
            out.append(ConfigSynonym(name, None if d.sensitive else default, ConfigSource.DEFAULT_CONFIG))
        return out

    def describe(self) -> list[ConfigEntry]:
        """Every broker property (strom's, then Kafka's others), for DescribeConfigs on a BROKER resource.

        Sources follow Kafka: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
        STATIC_BROKER_CONFIG, DEFAULT_CONFIG. Only DYNAMIC_BROKER_CONFIGS are writable; sensitive
        values are reported as null, as Kafka does.
        """
        out = []
        for d in BROKER_DEFS.values():
            value = format_value(self._values[d.name])
            out.append(
                ConfigEntry(
                    name=d.name,
                    value=None if d.sensitive else value,
                    source=self.source_of(d.name),
                    read_only=d.name not in DYNAMIC_BROKER_CONFIGS,
                    sensitive=d.sensitive,
                    type=d.type,
                    doc=d.doc,
                    synonyms=tuple(self.synonyms_of(d.name)),
                )
            )
        return out


def _int(values: Mapping[str, Value], name: str) -> int:
    v = values[name]
    assert isinstance(v, int)
    return v


def _opt_int(values: Mapping[str, Value], name: str) -> int | None:
    v = values[name]
    assert v is None or isinstance(v, int)
    return v


def _opt_str(values: Mapping[str, Value], name: str) -> str | None:
    v = values[name]
    assert v is None or isinstance(v, str)
    return v


def _derive(values: dict[str, Value], raw: Mapping[str, str]) -> dict[str, Any]:
    """Effective values that combine several properties, plus cross-property checks."""
    out: dict[str, Any] = {"raw": dict(raw), "_values": values}

    # broker.id / node.id: node.id is KRaft's name for the same thing.
    broker_id, node_id = _int(values, "broker.id"), _int(values, "node.id")
    if node_id >= 0:
        if "broker.id" in raw and broker_id != node_id:
            raise ConfigError("node.id", f"value {node_id} must equal broker.id ({broker_id})")
        broker_id = node_id
    out["broker_id"] = broker_id

    # Listeners.
    protocol_map = _parse_protocol_map(_opt_str(values, "listener.security.protocol.map") or "")
    out["listener_security_protocol_map"] = protocol_map
    listeners = parse_listeners("listeners", _opt_str(values, "listeners") or "")
    if not listeners:
        raise ConfigError("listeners", "at least one listener is required")
    for ls in listeners:
        if ls.name not in protocol_map:
            raise ConfigError(
                "listeners",
                f"no security protocol for listener {ls.name} in listener.security.protocol.map",
            )
    adv_text = _opt_str(values, "advertised.listeners")
    if adv_text is None:
        advertised = list(listeners)
    else:
        advertised = parse_listeners("advertised.listeners", adv_text)
        names = {ls.name for ls in listeners}
        for a in advertised:
            if a.name not in names:
                raise ConfigError(
                    "advertised.listeners", f"listener {a.name} is not one of the names in listeners"
                )
    adv_key = "advertised.listeners" if adv_text is not None else "listeners"
    resolved = []
    for a in advertised:
        if a.host in ("0.0.0.0", "::"):
            raise ConfigError(
                adv_key, f"{a} cannot be advertised: {a.host} is not routable; set advertised.listeners"
            )
        # Kafka advertises the machine's host name for an empty host (gethostname: no DNS wait).
        resolved.append(a if a.host else Listener(a.name, socket.gethostname(), a.port))
    out["listeners"] = listeners
    out["advertised_listeners"] = resolved

    ibl = _opt_str(values, "inter.broker.listener.name")
    if ibl is not None:
        if "security.inter.broker.protocol" in raw:
            raise ConfigError(
                "inter.broker.listener.name", "only one of it and security.inter.broker.protocol may be set"
            )
        ibl = ibl.upper()
        if ibl not in {a.name for a in resolved}:
            raise ConfigError("inter.broker.listener.name", f"{ibl} is not a listener in advertised.listeners")
    else:
        want = values["security.inter.broker.protocol"]
        ibl = next((a.name for a in resolved if protocol_map.get(a.name) == want), None)
        # A single broker never talks to another; only a cluster needs the listener.
        if ibl is None and values["zookeeper.connect"] is not None:
            raise ConfigError(
                "security.inter.broker.protocol", f"no advertised listener uses protocol {want}"
            )
    out["inter_broker_listener_name"] = ibl

    admin = parse_listeners("admin.listeners", _opt_str(values, "admin.listeners") or "")
    for a in admin:
        if a.name not in ("HTTP", "HTTPS"):
            raise ConfigError("admin.listeners", f"'{a}' must start with http:// or https://")
    out["admin_listeners"] = admin
    out["admin_allowed_hosts"] = _allowed_hosts(values.get("admin.allowed.hosts") or [])
    registry = parse_listeners("schema.registry.listeners", _opt_str(values, "schema.registry.listeners") or "")
    for a in registry:
        if a.name not in ("HTTP", "HTTPS"):
            raise ConfigError("schema.registry.listeners", f"'{a}' must start with http:// or https://")
    out["schema_registry_listeners"] = registry

    # Connection limits, with Kafka's cross-checks (KafkaConfig.validateValues).
    per_ip = _parse_per_ip_overrides(_opt_str(values, "max.connections.per.ip.overrides") or "")
    out["max_connections_per_ip_overrides"] = per_ip
    if _int(values, "max.connections.per.ip") == 0 and not per_ip:
        raise ConfigError("max.connections.per.ip", "may be 0 only when max.connections.per.ip.overrides names "
                                                    "the addresses that may connect")
    idle_ms = _int(values, "connections.max.idle.ms")
    delay_ms = _int(values, "connection.failed.authentication.delay.ms")
    if idle_ms >= 0 and delay_ms >= idle_ms:
        raise ConfigError("connection.failed.authentication.delay.ms",
                          f"value {delay_ms} must be less than connections.max.idle.ms ({idle_ms}), or the "
                          "connection would be closed as idle before the failure is answered")

    # log.dirs wins over log.dir.
    dirs_text = _opt_str(values, "log.dirs")
    key = "log.dirs" if dirs_text is not None else "log.dir"
    text = dirs_text if dirs_text is not None else (_opt_str(values, "log.dir") or "")
    dirs = [Path(s.strip()) for s in text.split(",") if s.strip()]
    if not dirs:
        raise ConfigError(key, "at least one log directory must be given in log.dirs or log.dir")
    seen: set[Path] = set()
    for d in dirs:
        norm = Path(str(d.expanduser())).absolute()
        if norm in seen:
            raise ConfigError(key, f"directory {d} is listed twice")
        seen.add(norm)
    out["log_dirs"] = dirs

    # Time precedence, as Kafka's KafkaConfig: ms over minutes over hours; negative = unlimited.
    roll_ms = _opt_int(values, "log.roll.ms")
    out["log_roll_ms"] = roll_ms if roll_ms is not None else _int(values, "log.roll.hours") * _MS_PER_HOUR
    jitter_ms = _opt_int(values, "log.roll.jitter.ms")
    out["log_roll_jitter_ms"] = (
        jitter_ms if jitter_ms is not None else _int(values, "log.roll.jitter.hours") * _MS_PER_HOUR
    )
    ret_ms = _opt_int(values, "log.retention.ms")
    ret_min = _opt_int(values, "log.retention.minutes")
    if ret_ms is None:
        ret_ms = (
            ret_min * _MS_PER_MINUTE
            if ret_min is not None
            else _int(values, "log.retention.hours") * _MS_PER_HOUR
        )
    out["log_retention_ms"] = -1 if ret_ms < 0 else ret_ms

    zk_conn = _opt_int(values, "zookeeper.connection.timeout.ms")
    out["zookeeper_connection_timeout_ms"] = (
        zk_conn if zk_conn is not None else _int(values, "zookeeper.session.timeout.ms")
    )
    out["super_users"] = [s.strip() for s in (_opt_str(values, "super.users") or "").split(";") if s.strip()]
    for user in out["super_users"]:
        if not valid_principal(user):
            raise ConfigError("super.users", f"'{user}' is not a principal of the form User:NAME")
    authorizer = (_opt_str(values, "authorizer.class.name") or "").strip()
    if authorizer and authorizer not in ACL_AUTHORIZERS:
        raise ConfigError("authorizer.class.name", f"unknown authorizer '{authorizer}'; strom has the ACL authorizer "
                                                   f"(kafka.security.authorizer.AclAuthorizer or "
                                                   f"org.apache.kafka.metadata.authorizer.StandardAuthorizer)")

    if _int(values, "group.min.session.timeout.ms") > _int(values, "group.max.session.timeout.ms"):
        raise ConfigError("group.min.session.timeout.ms", "must not be greater than group.max.session.timeout.ms")
    _check_consumer_group_settings(values)
    if _int(values, "log.cleaner.min.compaction.lag.ms") > _int(values, "log.cleaner.max.compaction.lag.ms"):
        raise ConfigError(
            "log.cleaner.min.compaction.lag.ms", "must not be greater than log.cleaner.max.compaction.lag.ms"
        )
    return out


def _check_consumer_group_settings(values: Mapping[str, Value]) -> None:
    """Kafka's GroupCoordinatorConfig checks: each of the session timeout and the heartbeat
    interval within its min and max, and the heartbeat interval below the session timeout (for
    consumer and share groups), and the share record lock duration within its bounds."""
    _check_group_timeouts(values, "group.share.", ("session.timeout.ms", "heartbeat.interval.ms",
                                                   "record.lock.duration.ms"))
    _check_group_timeouts(values, "group.consumer.", ("session.timeout.ms", "heartbeat.interval.ms"))
    protocols = values["group.coordinator.rebalance.protocols"]
    if not isinstance(protocols, list) or "classic" not in protocols:
        # Kafka: "Disabling the 'classic' protocol is not supported."
        raise ConfigError("group.coordinator.rebalance.protocols", "must contain classic (it cannot be disabled)")


def _check_group_timeouts(values: Mapping[str, Value], g: str, settings: tuple[str, ...]) -> None:
    for what in settings:
        value, lo, hi = (_int(values, g + w) for w in (what, "min." + what, "max." + what))
        if hi < lo:
            raise ConfigError(g + "max." + what, f"value {hi} must be at least {g}min.{what} ({lo})")
        if value < lo:
            raise ConfigError(g + what, f"value {value} must be at least {g}min.{what} ({lo})")
        if value > hi:
            raise ConfigError(g + what, f"value {value} must be no more than {g}max.{what} ({hi})")
    heartbeat, session = _int(values, g + "heartbeat.interval.ms"), _int(values, g + "session.timeout.ms")
    if heartbeat >= session:
        raise ConfigError(g + "heartbeat.interval.ms",
                          f"value {heartbeat} must be less than {g}session.timeout.ms ({session})")


# Kafka's Utils.validHostPattern: the characters a host name or address may have.
_HOST_RE = re.compile(r"[0-9a-zA-Z\-%._:]+")


def _parse_per_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count`` pairs (the count after the last ':', so an IPv6
    address may be written as it is), as Kafka's CoreUtils.parseCsvMap reads them."""
    key = "max.connections.per.ip.overrides"
    out: dict[str, int] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        host, sep, count = (p.strip() for p in item.rpartition(":"))
        if not sep or not host or not count:
            raise ConfigError(key, f"'{item}' is not of the form host:count")
        if not _HOST_RE.fullmatch(host):
            raise ConfigError(key, f"'{host}' is not a host name or address")
        if not re.fullmatch(r"[0-9]+", count) or int(count) > 2**31 - 1:
            raise ConfigError(key, f"'{item}': the count must be an int from 0 to 2147483647")
        if host.lower() in out:
            raise ConfigError(key, f"{host} is listed twice")
        out[host.lower()] = int(count)
    return out


def _allowed_hosts(items: Value) -> list[str]:
    """admin.allowed.hosts: names (any case, a trailing dot ignored), .domain suffixes, or *."""
    assert isinstance(items, list)
    out = []
    for item in items:
        name = item.strip().lower().rstrip(".")
        if name != "*" and not re.fullmatch(r"\.?[0-9a-z_\-]+(\.[0-9a-z_\-]+)*|\[?[0-9a-f:.]+\]?", name):
            raise ConfigError("admin.allowed.hosts", f"'{item}' is not a host name, a .domain or *")
        out.append(name.strip("[]"))
    return out


def _parse_protocol_map(text: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, proto = (p.strip() for p in item.partition(":"))
        if not sep or not name or not proto:
            raise ConfigError(key, f"'{item}' is not of the form NAME:PROTOCOL")
        proto = proto.upper()
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(key, f"'{item}': unknown security protocol {proto}")
        name = name.upper()
        if name in out:
            raise ConfigError(key, f"listener {name} is mapped twice")
        out[name] = proto
    return out
