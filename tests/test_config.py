"""strom.config: Kafka-named broker and topic configuration, parsing, precedence, errors, describe."""

from __future__ import annotations

import dataclasses
import logging
import pickle
from pathlib import Path

import pytest

from strom.config import (
    BROKER_CONFIGS,
    BROKER_DEFS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_DEFS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    describe_topic_config,
    parse_listeners,
    read_properties,
    topic_config_defaults,
    topic_config_values,
    validate_topic_configs,
)
from strom.config import docs as config_docs
from strom.config._defs import java_double

ROOT = Path(__file__).resolve().parent.parent
LONG_MAX = 2**63 - 1


def load(*overrides: str) -> BrokerConfig:
    return BrokerConfig.load(None, overrides)


def error(*overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(*overrides)
    return info.value


def write(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- defaults ---------------------------------------------------------------------------------


def test_defaults_are_kafkas_with_strom_embedded_choices() -> None:
    c = BrokerConfig.load()
    assert c.broker_id == 0
    assert c.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert c.advertised_listeners == c.listeners
    assert c.admin_listeners == [Listener("HTTP", "127.0.0.1", 8090)]
    assert c.log_dirs == [Path("./strom-data")]
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.delete_topic_enable is True
    assert c.log_segment_bytes == 1024**3
    assert c.log_roll_ms == 168 * 3600 * 1000
    assert c.log_flush_interval_messages == LONG_MAX
    assert c.log_flush_interval_ms is None
    assert c.log_flush_scheduler_interval_ms == LONG_MAX
    assert c.log_retention_ms == 168 * 3600 * 1000
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_index_interval_bytes == 4096
    assert c.log_cleanup_policy == ["delete"]
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.message_max_bytes == 1048588
    assert c.socket_request_max_bytes == 104857600
    assert c.min_insync_replicas == 1
    assert c.offsets_topic_num_partitions == 1
    assert c.offsets_topic_replication_factor == 1
    assert c.offsets_retention_minutes == 10080
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.group_min_session_timeout_ms == 6000
    assert c.group_max_session_timeout_ms == 1800000
    assert c.log_cleaner_enable is True
    assert c.log_cleaner_delete_retention_ms == 86400000
    assert c.log_cleaner_min_cleanable_ratio == 0.5
    assert c.log_cleaner_min_compaction_lag_ms == 0
    assert c.log_cleaner_max_compaction_lag_ms == LONG_MAX
    assert c.zookeeper_connect is None
    assert c.zookeeper_connection_timeout_ms == c.zookeeper_session_timeout_ms == 18000
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.raw == {}
    assert c.get("num.io.threads") == 8
    assert c.get("queued.max.requests") == 500


def test_every_default_parses_and_passes_its_validator() -> None:
    for d in (*BROKER_CONFIGS, *TOPIC_CONFIGS):
        d.parsed_default()  # raises ConfigError if the table is wrong


def test_every_attribute_comes_from_a_definition() -> None:
    c = BrokerConfig.load()
    for f in dataclasses.fields(c):
        if f.name in ("raw", "_values", "log_dirs", "log_retention_ms", "dynamic_default", "dynamic_broker",
                      "static_raw"):
            continue
        name = f.name.replace("_", ".")
        assert name in BROKER_DEFS or f.name in ("log_roll_ms", "log_roll_jitter_ms"), f.name


def test_broker_and_topic_tables_agree_on_synonyms() -> None:
    for d in BROKER_CONFIGS:
        if d.topic_config is not None:
            assert d.name in TOPIC_DEFS[d.topic_config].synonyms, d.name
    for t in TOPIC_CONFIGS:
        for s in t.synonyms:
            assert BROKER_DEFS[s].topic_config == t.name, s


def test_topic_defaults_follow_broker_defaults() -> None:
    d = topic_config_defaults(BrokerConfig.load())
    assert d["retention.ms"] == "604800000"
    assert d["segment.ms"] == "604800000"
    assert d["segment.bytes"] == "1073741824"
    assert d["cleanup.policy"] == "delete"
    assert d["max.message.bytes"] == "1048588"
    assert d["flush.ms"] == str(LONG_MAX)
    assert d["min.cleanable.dirty.ratio"] == "0.5"
    # Unchanged broker: the topic table's own defaults are what Kafka documents for topics.
    for t in TOPIC_CONFIGS:
        assert d[t.name] == (t.default or ""), t.name


# --- precedence -------------------------------------------------------------------------------


def test_log_dirs_wins_over_log_dir(tmp_path: Path) -> None:
    assert load("log.dir=/a").log_dirs == [Path("/a")]
    assert load("log.dir=/a", "log.dirs=/b, /c").log_dirs == [Path("/b"), Path("/c")]


def test_roll_ms_wins_over_hours() -> None:
    assert load("log.roll.hours=2").log_roll_ms == 2 * 3600 * 1000
    assert load("log.roll.hours=2", "log.roll.ms=1234").log_roll_ms == 1234
    assert load("log.roll.jitter.hours=1").log_roll_jitter_ms == 3600 * 1000
    assert load("log.roll.jitter.hours=1", "log.roll.jitter.ms=5").log_roll_jitter_ms == 5


def test_retention_ms_over_minutes_over_hours() -> None:
    assert load("log.retention.hours=1").log_retention_ms == 3600 * 1000
    assert load("log.retention.hours=1", "log.retention.minutes=2").log_retention_ms == 120000
    assert load("log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=7").log_retention_ms == 7


def test_negative_retention_means_forever() -> None:
    assert load("log.retention.hours=-1").log_retention_ms == -1
    assert load("log.retention.ms=-1").log_retention_ms == -1
    assert load("log.retention.minutes=-5").log_retention_ms == -1


def test_overrides_win_over_file(tmp_path: Path) -> None:
    p = write(tmp_path, "num.partitions=3\nbroker.id=7\n")
    c = BrokerConfig.load(p, ["num.partitions=5"])
    assert (c.num_partitions, c.broker_id) == (5, 7)
    assert c.raw == {"num.partitions": "5", "broker.id": "7"}


def test_overrides_as_mapping_and_value_with_equals() -> None:
    c = BrokerConfig.load(overrides={"broker.id": "3"})
    assert c.broker_id == 3
    c = load("sasl.jaas.config=a=b c=d")
    assert c.sasl_jaas_config == "a=b c=d"


def test_with_overrides_keeps_earlier_settings() -> None:
    c = load("broker.id=4").with_overrides(["num.partitions=2"])
    assert (c.broker_id, c.num_partitions) == (4, 2)


def test_node_id_is_broker_id() -> None:
    assert load("node.id=5").broker_id == 5
    assert load("node.id=5", "broker.id=5").broker_id == 5
    assert error("node.id=5", "broker.id=6").key == "node.id"


def test_zookeeper_connection_timeout_defaults_to_session_timeout() -> None:
    assert load("zookeeper.session.timeout.ms=999").zookeeper_connection_timeout_ms == 999
    c = load("zookeeper.session.timeout.ms=999", "zookeeper.connection.timeout.ms=5")
    assert c.zookeeper_connection_timeout_ms == 5


def test_values_are_trimmed_and_booleans_case_insensitive() -> None:
    c = load("num.partitions=  4 ", "auto.create.topics.enable=FALSE", "log.cleanup.policy=compact , delete")
    assert c.num_partitions == 4
    assert c.auto_create_topics_enable is False
    assert c.log_cleanup_policy == ["compact", "delete"]


# --- listeners --------------------------------------------------------------------------------


def test_listener_parsing() -> None:
    ls = parse_listeners("listeners", "PLAINTEXT://:9092, ssl://host.example:9093,SASL_SSL://[::1]:9094")
    assert ls == [
        Listener("PLAINTEXT", "", 9092),
        Listener("SSL", "host.example", 9093),
        Listener("SASL_SSL", "::1", 9094),
    ]
    assert ls[0].bind_host is None
    assert str(ls[2]) == "SASL_SSL://[::1]:9094"


def test_port_zero_is_allowed_more_than_once() -> None:
    c = load("listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    assert [ls.port for ls in c.listeners] == [0, 0]


def test_advertised_listeners() -> None:
    c = load("listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners=PLAINTEXT://broker1:19092")
    assert c.listeners == [Listener("PLAINTEXT", "0.0.0.0", 9092)]
    assert c.advertised_listeners == [Listener("PLAINTEXT", "broker1", 19092)]


def test_empty_host_is_advertised_as_host_name() -> None:
    c = load("listeners=PLAINTEXT://:9092")
    assert c.listeners[0].host == ""
    assert c.advertised_listeners[0].host not in ("", "0.0.0.0")


def test_custom_listener_names_through_protocol_map() -> None:
    c = load(
        "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SSL",
        "inter.broker.listener.name=internal",
    )
    assert [ls.name for ls in c.listeners] == ["INTERNAL", "EXTERNAL"]
    assert c.listener_security_protocol_map == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"}
    assert c.inter_broker_listener_name == "INTERNAL"


def test_single_broker_needs_no_inter_broker_listener() -> None:
    c = load("listeners=SSL://127.0.0.1:9093")
    assert c.inter_broker_listener_name is None
    e = error("listeners=SSL://127.0.0.1:9093", "zookeeper.connect=127.0.0.1:2181")
    assert e.key == "security.inter.broker.protocol"


def test_admin_listeners_can_be_turned_off() -> None:
    assert load("admin.listeners=").admin_listeners == []
    assert load("admin.listeners=http://0.0.0.0:1").admin_listeners == [Listener("HTTP", "0.0.0.0", 1)]


def test_admin_allowed_hosts() -> None:
    assert load().admin_allowed_hosts == []
    assert load("admin.allowed.hosts=Console.Example., .corp.example,*").admin_allowed_hosts == [
        "console.example", ".corp.example", "*"]


def test_per_ip_overrides_are_host_count_pairs() -> None:
    c = load("max.connections.per.ip=0", "max.connections.per.ip.overrides=10.0.0.7:500, Monitor.Example:5,::1:3")
    assert c.max_connections_per_ip == 0
    assert c.max_connections_per_ip_overrides == {"10.0.0.7": 500, "monitor.example": 5, "::1": 3}
    assert load().max_connections_per_ip_overrides == {}


# --- errors: one line naming the key ----------------------------------------------------------

BAD = [
    ("num.partitions=three", "num.partitions", "not a valid int"),
    ("num.partitions=1.5", "num.partitions", "not a valid int"),
    ("num.partitions=2147483648", "num.partitions", "out of range"),
    ("num.partitions=0", "num.partitions", "at least 1"),
    ("offsets.topic.replication.factor=40000", "offsets.topic.replication.factor", "out of range"),
    ("log.retention.bytes=9223372036854775808", "log.retention.bytes", "out of range"),
    ("log.retention.ms=", "log.retention.ms", "not a valid long"),
    ("log.segment.bytes=13", "log.segment.bytes", "at least 14"),
    ("auto.create.topics.enable=yes", "auto.create.topics.enable", "true or false"),
    ("log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio", "no more than 1"),
    ("log.cleaner.min.cleanable.ratio=half", "log.cleaner.min.cleanable.ratio", "not a valid double"),
    ("log.cleaner.min.cleanable.ratio=nan", "log.cleaner.min.cleanable.ratio", "number"),
    ("log.message.timestamp.type=createtime", "log.message.timestamp.type", "CreateTime, LogAppendTime"),
    ("log.cleanup.policy=remove", "log.cleanup.policy", "'remove'"),
    ("log.cleanup.policy=", "log.cleanup.policy", "one or more"),
    ("compression.type=brotli", "compression.type", "must be one of"),
    ("listeners=localhost:9092", "listeners", "NAME://host:port"),
    ("listeners=PLAINTEXT://127.0.0.1", "listeners", "NAME://host:port"),
    ("listeners=PLAINTEXT://127.0.0.1:70000", "listeners", "port 70000"),
    ("listeners=", "listeners", "at least one listener"),
    ("listeners=PLAINTEXT://a:1,PLAINTEXT://b:2", "listeners", "different name"),
    ("listeners=PLAINTEXT://a:1,SSL://b:1", "listeners", "different port"),
    ("listeners=FOO://a:1", "listeners", "no security protocol for listener FOO"),
    ("listeners=PLAINTEXT://0.0.0.0:9092", "listeners", "not routable"),
    ("advertised.listeners=SSL://h:1", "advertised.listeners", "not one of the names"),
    ("listener.security.protocol.map=PLAINTEXT:TLS", "listener.security.protocol.map", "TLS"),
    ("admin.listeners=ftp://h:1", "admin.listeners", "http://"),
    ("schema.registry.listeners=ftp://h:1", "schema.registry.listeners", "http://"),
    ("schema.registry.listeners=http://h", "schema.registry.listeners", "NAME://host:port"),
    ("admin.allowed.hosts=console.example,bad host", "admin.allowed.hosts", "'bad host'"),
    ("admin.allowed.hosts=http://console.example", "admin.allowed.hosts", "not a host name"),
    ("log.dirs=/a,/a", "log.dirs", "twice"),
    ("log.dirs= , ", "log.dirs", "at least one log directory"),
    ("log.dir=", "log.dir", "at least one log directory"),
    ("group.min.session.timeout.ms=10", "group.min.session.timeout.ms", "ok"),
    ("broker.id=-1", "broker.id", "at least 0"),
    ("max.connections=-1", "max.connections", "at least 0"),
    ("max.connections.per.ip=0", "max.connections.per.ip", "max.connections.per.ip.overrides"),
    ("max.connections.per.ip.overrides=10.0.0.1", "max.connections.per.ip.overrides", "host:count"),
    ("max.connections.per.ip.overrides=10.0.0.1:many", "max.connections.per.ip.overrides", "int"),
    ("max.connections.per.ip.overrides=host#1:5", "max.connections.per.ip.overrides", "host#1"),
    ("max.connections.per.ip.overrides=a:1,A:2", "max.connections.per.ip.overrides", "twice"),
    ("connection.failed.authentication.delay.ms=-1", "connection.failed.authentication.delay.ms", "at least 0"),
    ("connections.max.idle.ms=100", "connection.failed.authentication.delay.ms", "connections.max.idle.ms (100)"),
    ("=5", "=5", "key=value"),
    ("num.partitions", "num.partitions", "key=value"),
]


@pytest.mark.parametrize(("override", "key", "fragment"), BAD)
def test_bad_values_give_one_line_naming_the_key(override: str, key: str, fragment: str) -> None:
    extra = ["group.max.session.timeout.ms=5"] if key == "group.min.session.timeout.ms" else []
    e = error(override, *extra)
    assert e.key == key
    text = str(e)
    assert "\n" not in text
    assert text.startswith(f"invalid config {key}: ")
    if fragment != "ok":
        assert fragment in e.reason


def test_error_survives_pickling() -> None:
    e = pickle.loads(pickle.dumps(ConfigError("a.b", "bad\nvalue")))
    assert (e.key, e.reason, str(e)) == ("a.b", "bad value", "invalid config a.b: bad value")


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(missing)
    assert info.value.key == str(missing)
    assert "cannot read" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.load(tmp_path)  # a directory


def test_unknown_keys_are_kept_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strom.config"):
        c = load("my.plugin.setting=x", "listener.name.sasl_plaintext.plain.sasl.jaas.config=y")
    assert c.raw["my.plugin.setting"] == "x"
    assert c.raw["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == "y"
    warned = [r.getMessage() for r in caplog.records]
    assert any("'my.plugin.setting'" in m for m in warned)
    assert not any("listener.name" in m for m in warned)


# --- properties files -------------------------------------------------------------------------


def test_properties_syntax(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   broker.id = 3\n"
        "num.partitions:4\n"
        "default.replication.factor 1\n"
        "log.dirs=/data/one,\\\n"
        "         /data/two\n"
        "zookeeper.connect=\\u0068ost:2181\n"
        "key\\ with\\ spaces=v\\tw\n"
        "emptykey\n"
        "a=b=c\n"
        "dup=1\n"
        "dup=2\n"
        "  # indented comment\n"
        "trailing=x   \n",
    )
    props = read_properties(p)
    assert props["broker.id"] == "3"
    assert props["num.partitions"] == "4"
    assert props["default.replication.factor"] == "1"
    assert props["log.dirs"] == "/data/one,/data/two"
    assert props["zookeeper.connect"] == "host:2181"
    assert props["key with spaces"] == "v\tw"
    assert props["emptykey"] == ""
    assert props["a"] == "b=c"
    assert props["dup"] == "2"
    assert props["trailing"] == "x   "  # Java keeps it; Kafka trims when parsing
    assert not any(k.startswith(("#", "!")) for k in props)
    c = BrokerConfig.load(p)
    assert c.broker_id == 3 and c.num_partitions == 4
    assert c.log_dirs == [Path("/data/one"), Path("/data/two")]
    assert c.zookeeper_connect == "host:2181"


def test_properties_continuation_at_end_of_file_and_crlf(tmp_path: Path) -> None:
    p = tmp_path / "crlf.properties"
    p.write_bytes(b"broker.id=1\r\nnum.partitions=2\\")
    assert read_properties(p) == {"broker.id": "1", "num.partitions": "2"}


def test_properties_encodings(tmp_path: Path) -> None:
    utf8 = tmp_path / "u.properties"
    utf8.write_bytes("log.dirs=/data/caf\u00e9\n".encode())
    assert read_properties(utf8)["log.dirs"] == "/data/caf\u00e9"
    latin = tmp_path / "l.properties"
    latin.write_bytes("log.dirs=/data/caf\u00e9\n".encode("latin-1"))
    assert read_properties(latin)["log.dirs"] == "/data/caf\u00e9"


def test_properties_bad_unicode_escape(tmp_path: Path) -> None:
    p = write(tmp_path, "broker.id=\\u12G4\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(p)
    assert info.value.key == str(p) and "\n" not in str(info.value)


def test_kafka_sample_server_properties(tmp_path: Path) -> None:
    # The shape of Kafka's config/server.properties (ZooKeeper mode).
    p = write(
        tmp_path,
        """
############################# Server Basics #############################
broker.id=0
#listeners=PLAINTEXT://:9092
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
""",
    )
    c = BrokerConfig.load(p)
    assert c.log_dirs == [Path("/tmp/kafka-logs")]
    assert c.zookeeper_connect == "localhost:2181"
    assert c.group_initial_rebalance_delay_ms == 0
    assert c.get("num.network.threads") == 3


# --- describe ---------------------------------------------------------------------------------


def test_broker_describe_sources_and_flags() -> None:
    c = load("num.partitions=3", "auto.create.topics.enable=TRUE", "ssl.key.password=secret")
    entries = {e.name: e for e in c.describe()}
    assert set(entries) == set(BROKER_DEFS)
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG == "STATIC_BROKER_CONFIG"
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["log.retention.hours"].source == "DEFAULT_CONFIG"
    assert entries["log.retention.hours"].value == "168"
    assert entries["log.retention.ms"].value is None
    assert entries["ssl.key.password"].sensitive and entries["ssl.key.password"].value is None
    assert all(s.value is None for s in entries["ssl.key.password"].synonyms)
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    assert entries["log.segment.bytes"].type is ConfigType.INT
    # Only the dynamically updatable ones (AlterConfigs on a BROKER resource) are writable.
    assert all(e.read_only == (e.name not in DYNAMIC_BROKER_CONFIGS) for e in entries.values())
    assert not entries["log.retention.ms"].read_only and entries["num.partitions"].read_only
    assert entries["num.partitions"].synonyms[0].source == "STATIC_BROKER_CONFIG"
    assert entries["num.partitions"].synonyms[-1].value == "1"
    assert ConfigSource.DEFAULT_CONFIG.id == 5 and ConfigSource.DYNAMIC_TOPIC_CONFIG.id == 1
    assert "secret" not in repr(c)


def test_topic_describe_sources() -> None:
    c = load("log.retention.hours=1", "log.segment.bytes=1048576")
    entries = {e.name: e for e in describe_topic_config(c, {"cleanup.policy": "compact"})}
    assert set(entries) == set(TOPIC_DEFS)
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == (
        "compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("3600000", "STATIC_BROKER_CONFIG")
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("1048576", "STATIC_BROKER_CONFIG")
    assert (entries["segment.ms"].value, entries["segment.ms"].source) == ("604800000", "DEFAULT_CONFIG")
    assert not any(e.read_only or e.sensitive for e in entries.values())
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [(s.name, s.source) for s in entries["cleanup.policy"].synonyms] == [
        ("cleanup.policy", "DYNAMIC_TOPIC_CONFIG"),
        ("log.cleanup.policy", "DEFAULT_CONFIG"),
    ]
    assert [e.name for e in describe_topic_config(c, {})] == sorted(TOPIC_DEFS)


def test_topic_describe_flush_ms_follows_broker_fallback() -> None:
    entries = {e.name: e for e in describe_topic_config(load("log.flush.scheduler.interval.ms=500"), {})}
    assert (entries["flush.ms"].value, entries["flush.ms"].source) == ("500", "STATIC_BROKER_CONFIG")
    entries = {e.name: e for e in describe_topic_config(load("log.flush.interval.ms=20"), {})}
    assert entries["flush.ms"].value == "20"


# --- topic configs ----------------------------------------------------------------------------


def test_valid_topic_configs() -> None:
    validate_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "retention.bytes": "1000",
            "segment.bytes": "14",
            "segment.ms": "1",
            "max.message.bytes": "2000000",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.1",
            "compression.type": "zstd",
            "min.insync.replicas": "1",
            "flush.messages": "1",
            "flush.ms": "0",
            "delete.retention.ms": "0",
            "index.interval.bytes": "0",
            "unclean.leader.election.enable": "true",
        }
    )
    validate_topic_configs({"retention.ms": None})  # a reset to the default


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("retention.ms", "-2", "at least -1"),
        ("retention.ms", "soon", "not a valid long"),
        ("segment.bytes", "13", "at least 14"),
        ("segment.bytes", "2147483648", "out of range"),
        ("segment.ms", "0", "at least 1"),
        ("cleanup.policy", "compact,forever", "'forever'"),
        ("message.timestamp.type", "Now", "must be one of"),
        ("min.cleanable.dirty.ratio", "2", "no more than 1"),
        ("min.insync.replicas", "0", "at least 1"),
        ("compression.type", "lzma", "must be one of"),
        ("preallocate", "maybe", "true or false"),
        ("flush.messages", "0", "at least 1"),
        ("retention.hours", "1", "unknown topic config"),
        ("log.retention.ms", "1", "unknown topic config"),
    ],
)
def test_bad_topic_configs(name: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({name: value})
    assert info.value.key == name
    assert str(info.value).startswith(f"invalid config {name}: ") and "\n" not in str(info.value)
    assert fragment in info.value.reason


def test_topic_compaction_lag_conflict() -> None:
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    broker = load("log.cleaner.max.compaction.lag.ms=5")
    validate_topic_configs({"min.compaction.lag.ms": "10"})  # alone: fine
    with pytest.raises(ConfigError):
        validate_topic_configs({"min.compaction.lag.ms": "10"}, broker)


def test_topic_config_values() -> None:
    v = topic_config_values(load("log.retention.minutes=3"), {"cleanup.policy": "compact", "segment.ms": "9"})
    assert v["retention.ms"] == 180000
    assert v["cleanup.policy"] == ["compact"]
    assert v["segment.ms"] == 9


def test_log_config_for() -> None:
    import strom.storage.log as log_mod
    from strom.config import log_config_for

    cfg = log_config_for(load("log.retention.hours=2", "log.flush.interval.messages=1"), {"segment.bytes": "4096"})
    assert isinstance(cfg, log_mod.LogConfig)
    assert cfg.segment_bytes == 4096
    assert cfg.retention_ms == 2 * 3600 * 1000
    assert cfg.flush_interval_messages == 1
    assert cfg.flush_interval_ms is None  # Long.MAX_VALUE: no timed flush
    assert cfg.cleanup_policy == "delete"
    assert cfg.message_timestamp_type == "CreateTime"
    assert cfg.max_message_bytes == 1048588
    assert cfg.index_interval_bytes == 4096
    assert cfg.retention_bytes == -1
    assert cfg.segment_ms == 7 * 24 * 3600 * 1000
    cfg = log_config_for(load("log.flush.interval.ms=100"), {"cleanup.policy": "compact,delete"})
    assert cfg.flush_interval_ms == 100
    assert cfg.cleanup_policy == "compact,delete"
    assert log_config_for(load(), {"flush.ms": "7"}).flush_interval_ms == 7
    with pytest.raises(ConfigError):
        log_config_for(load(), {"segment.bytes": "1"})


# --- formatting and docs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.5, "0.5"), (1.0, "1.0"), (0.0, "0.0"), (1e7, "1.0E7"), (1.5e-4, "1.5E-4"), (123456.75, "123456.75")],
)
def test_doubles_print_like_java(x: float, text: str) -> None:
    assert java_double(x) == text


def test_docs_tables_match_definitions() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert config_docs.generated_sections(doc) == config_docs.render(), (
        "docs/configuration.md is out of date: run .venv/bin/python -m strom.config.docs docs/configuration.md"
    )
