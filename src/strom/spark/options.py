"""Options of the `strom` Spark data source, named and checked as Spark's Kafka source names them.

Everything here is plain Python (no Spark, no network), so it is picklable and testable alone.
Option names are case-insensitive: Spark hands the data source a dict with lower-cased keys.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# Special values in per-partition offset JSON, as in Spark's Kafka source.
LATEST = -1
EARLIEST = -2

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


class OptionError(ValueError):
    """An invalid or inconsistent option; the message names the option."""


# --------------------------------------------------------------------------------------------------
# Offset specifications


@dataclass(frozen=True)
class EarliestOffsets:
    pass


@dataclass(frozen=True)
class LatestOffsets:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; -2 means earliest, -1 latest."""

    offsets: dict[TopicPartition, int]


@dataclass(frozen=True)
class GlobalTimestamp:
    """The first offset whose timestamp is >= this (ms), in every partition."""

    timestamp_ms: int


@dataclass(frozen=True)
class SpecificTimestamps:
    timestamps: dict[TopicPartition, int]


OffsetSpec = EarliestOffsets | LatestOffsets | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


# --------------------------------------------------------------------------------------------------
# Subscriptions


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Spark's three ways to name the input: subscribe, subscribePattern or assign."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.partitions)


# --------------------------------------------------------------------------------------------------
# JSON forms (Spark's): {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}


def partition_offsets_from_json(text: str, option: str) -> dict[TopicPartition, int]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(f"option '{option}': not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(raw, dict):
        raise OptionError(f"option '{option}': expected a JSON object like {{\"topic\":{{\"0\":23}}}}, got {text!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{option}': topic {topic!r} must map partitions to numbers, got {parts!r}")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(f"option '{option}': partition {p!r} of topic {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option '{option}': offset of {topic}-{p} must be an integer, got {value!r}")
            out[(topic, partition)] = value
    return out


def partition_offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The offset dict Spark checkpoints: topics and partitions sorted, so equal offsets are equal JSON."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def partition_offsets_from_dict(raw: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {(topic, int(p)): int(o) for topic, parts in raw.items() for p, o in parts.items()}


def assign_from_json(text: str) -> tuple[TopicPartition, ...]:
    """Spark's assign JSON: {"topicA":[0,1],"topicB":[2,4]}."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(f"option 'assign': not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise OptionError(f"option 'assign': expected a JSON object like {{\"topicA\":[0,1]}}, got {text!r}")
    out: list[TopicPartition] = []
    for topic, parts in raw.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise OptionError(f"option 'assign': topic {topic!r} must map to a list of partition numbers")
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


# --------------------------------------------------------------------------------------------------
# The parsed options


# Kafka client settings a user may not set through "kafka.*": the source owns them (as Spark does).
_UNSUPPORTED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "key.serializer": "keys are always written as bytes or strings",
    "value.serializer": "values are always written as bytes or strings",
    "enable.auto.commit": "the source does not commit offsets; its checkpoint tracks progress",
    "interceptor.classes": "not supported",
}


@dataclass(frozen=True)
class ClientOptions:
    bootstrap_servers: str
    kafka: dict[str, str] = field(default_factory=dict)  # "kafka.*" settings, prefix removed

    def client_config(self) -> dict[str, str]:
        conf = {k: v for k, v in self.kafka.items() if k not in ("bootstrap.servers", "group.id")}
        conf["bootstrap.servers"] = self.bootstrap_servers
        # kafka.security.protocol, kafka.sasl.* and kafka.ssl.* reach the client; Java-style
        # kafka.sasl.jaas.config and PEM kafka.ssl.truststore.location are translated.
        from strom.security.client_properties import librdkafka_properties  # its imports cost 0.15 s

        return librdkafka_properties(conf)


# The "kafka.*" settings the direct reader (strom.spark.direct) honours; with any other one, the
# reader option's "auto" uses the consumer reader, and "direct" is refused.
DIRECT_KAFKA_OPTIONS = frozenset({
    "bootstrap.servers", "client.id", "group.id", "isolation.level", "security.protocol",
    "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.truststore.location", "ssl.truststore.type",
    "ssl.keystore.location", "ssl.keystore.type",
})
READERS = ("auto", "direct", "consumer")


@dataclass(frozen=True)
class ValueAvro:
    """strom's own source options valueAvroSubject, valueAvroMode and schema.registry.*: the reader
    decodes the value column as from_avro does (strom.spark.avro), in its own Arrow path."""

    subject: str
    registry: dict[str, str]  # SchemaRegistryClient settings: url (schema.registry.url) and the others
    mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST"


def value_avro_options(options: Mapping[str, str]) -> ValueAvro | None:
    subject = _get(options, "valueAvroSubject")
    registry = {k[len("schema.registry."):]: str(v) for k, v in options.items()
                if k.lower().startswith("schema.registry.")}
    mode = (_get(options, "valueAvroMode") or "FAILFAST").strip().upper()
    if subject is None:
        if registry or _get(options, "valueAvroMode") is not None:
            raise OptionError("options 'schema.registry.*' and 'valueAvroMode' go with 'valueAvroSubject'")
        return None
    if "url" not in registry:
        raise OptionError("option 'valueAvroSubject' needs 'schema.registry.url'")
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise OptionError(f"option 'valueAvroMode': expected FAILFAST or PERMISSIVE, got {mode!r}")
    return ValueAvro(subject, registry, "PERMISSIVE" if mode == "PERMISSIVE" else "FAILFAST")


@dataclass(frozen=True)
class SourceOptions:
    client: ClientOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"
    poll_timeout_ms: int = 120_000
    group_id: str = ""
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    # Driver-side metadata and offset lookups: asked again this many times, this long apart, after
    # a failure (Spark's fetchOffset.numRetries / fetchOffset.retryIntervalMs, same defaults).
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    arrow: bool = True  # hand Spark Arrow record batches (false: Python tuples, slower; for comparison)
    # How executors read: "direct" (Fetch requests decoded by compiled code, strom.spark.direct),
    # "consumer" (confluent-kafka, strom.spark.fetch) or "auto" (direct when it can).
    reader: Literal["auto", "direct", "consumer"] = "auto"
    value_avro: ValueAvro | None = None  # valueAvroSubject: the value column decoded from Avro

    def direct_blockers(self) -> list[str]:
        """What keeps the direct reader from reading with these options (empty: nothing)."""
        out = []
        if not self.arrow:
            out.append("arrow=false")
        out += [f"Kafka option '{k}'" for k in sorted(self.client.kafka)
                if k not in DIRECT_KAFKA_OPTIONS and not (k == "check.crcs" and self.client.kafka[k].lower() == "false")]
        return out


@dataclass(frozen=True)
class SinkOptions:
    client: ClientOptions
    topic: str | None = None
    # Streaming writes: each task's records in one transaction with a progress mark, so a replayed
    # micro-batch is not written twice (strom.spark.sink.produce_exactly_once).
    exactly_once: bool = False
    transactional_id_prefix: str = "strom-spark-"
    # None: a headers column is written when the DataFrame has one (what Spark's sink does);
    # False: it is left out; True: it is required.
    include_headers: bool | None = None


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None else str(value)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{name}': expected true or false, got {value!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise OptionError(f"option '{name}': expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise OptionError(f"option '{name}': expected a positive integer, got {value!r}")
    return n


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$")


def _non_negative_int(options: Mapping[str, str], name: str, default: int) -> int:
    value = _get(options, name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise OptionError(f"option '{name}': expected a non-negative integer, got {value!r}")
    return n


def _duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    value = _get(options, name)
    if value is None:
        return default
    m = _DURATION.match(value.lower())
    if not m:
        raise OptionError(f"option '{name}': expected a duration such as 500ms, 30s or 5m, got {value!r}")
    n, unit = int(m.group(1)), m.group(2) or "ms"
    return n * {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}[unit]


def client_options(options: Mapping[str, str]) -> ClientOptions:
    kafka: dict[str, str] = {}
    for key, value in options.items():
        k = key.lower()
        if k.startswith("kafka."):
            name = k[len("kafka."):]
            if name in _UNSUPPORTED_KAFKA:
                raise OptionError(f"Kafka option '{name}' is not supported: {_UNSUPPORTED_KAFKA[name]}")
            kafka[name] = str(value)
    bootstrap = _get(options, "bootstrap.servers") or kafka.get("bootstrap.servers")
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' (or 'bootstrap.servers') must be specified")
    try:
        from strom.security.client_properties import librdkafka_properties

        librdkafka_properties(kafka)  # checked now, not when the first task connects
    except ValueError as e:
        raise OptionError(f"Kafka option {e}") from None
    return ClientOptions(bootstrap_servers=bootstrap, kafka=kafka)


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {name: _get(options, name) for name in ("subscribe", "subscribePattern", "assign")}
    present = [name for name, v in given.items() if v is not None]
    if len(present) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be specified"
            + (f" (got {', '.join(present)})" if present else ""))
    kind = present[0]
    value = given[kind] or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option 'subscribe': no topic to subscribe to in {value!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        if not value.strip():
            raise OptionError("option 'subscribePattern': the pattern is empty")
        try:
            re.compile(value)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern': invalid regular expression {value!r}: {e}") from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", partitions=assign_from_json(value))


def _offset_spec(options: Mapping[str, str], prefix: str, default: OffsetSpec) -> OffsetSpec:
    """`<prefix>Timestamp` > `<prefix>OffsetsByTimestamp` > `<prefix>Offsets`, the precedence Spark uses."""
    ts = _get(options, f"{prefix}Timestamp")
    if ts is not None:
        try:
            return GlobalTimestamp(int(ts))
        except ValueError:
            raise OptionError(f"option '{prefix}Timestamp': expected milliseconds since the epoch, got {ts!r}") from None
    by_ts = _get(options, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return SpecificTimestamps(partition_offsets_from_json(by_ts, f"{prefix}OffsetsByTimestamp"))
    text = _get(options, f"{prefix}Offsets")
    if text is None:
        return default
    v = text.strip()
    if v.lower() == "earliest":
        return EarliestOffsets()
    if v.lower() == "latest":
        return LatestOffsets()
    return SpecificOffsets(partition_offsets_from_json(v, f"{prefix}Offsets"))


def source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Parse and check the reader options; `streaming` selects Spark's rules for readStream vs read."""
    client = client_options(options)
    subscription = _subscription(options)
    starting = _offset_spec(options, "starting", LatestOffsets() if streaming else EarliestOffsets())
    ending = _offset_spec(options, "ending", LatestOffsets())
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, name) is not None:
                raise OptionError(f"option '{name}' is not valid in streaming queries")
    else:
        if isinstance(starting, LatestOffsets) or (
                isinstance(starting, SpecificOffsets) and LATEST in starting.offsets.values()):
            raise OptionError("option 'startingOffsets': latest is not valid for batch queries")
        if isinstance(ending, EarliestOffsets) or (
                isinstance(ending, SpecificOffsets) and EARLIEST in ending.offsets.values()):
            raise OptionError("option 'endingOffsets': earliest is not valid for batch queries")
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if _get(options, name) is not None:
                raise OptionError(f"option '{name}' is only valid in streaming queries")
    if isinstance(starting, SpecificOffsets):
        for tp, off in starting.offsets.items():
            if off < EARLIEST:
                raise OptionError(f"option 'startingOffsets': offset {off} of {tp[0]}-{tp[1]} is not valid")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option 'startingOffsetsByTimestampStrategy': expected 'error' or 'latest', got {strategy!r}")
    isolation = client.kafka.get("isolation.level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"Kafka option 'isolation.level': expected read_uncommitted or read_committed, got {isolation!r}")
    reader = (_get(options, "reader") or "auto").strip().lower()
    if reader not in READERS:
        raise OptionError(f"option 'reader': expected auto, direct or consumer, got {reader!r}")
    group_id = client.kafka.get("group.id") or (
        f"{_get(options, 'groupIdPrefix') or 'spark-strom-source'}-{uuid.uuid4()}")
    parsed = SourceOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", 15 * 60 * 1000),
        min_partitions=_positive_int(options, "minPartitions"),
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
        timestamp_strategy="latest" if strategy == "latest" else "error",
        poll_timeout_ms=_duration_ms(options, "kafkaConsumer.pollTimeoutMs", 120_000),
        group_id=group_id,
        isolation_level="read_committed" if isolation == "read_committed" else "read_uncommitted",
        fetch_offset_retries=_non_negative_int(options, "fetchOffset.numRetries", 3),
        fetch_offset_retry_interval_ms=_non_negative_int(options, "fetchOffset.retryIntervalMs", 10),
        arrow=_bool(options, "arrow", True),
        reader="direct" if reader == "direct" else "consumer" if reader == "consumer" else "auto",
        value_avro=value_avro_options(options),
    )
    if parsed.value_avro is not None and not parsed.arrow:
        raise OptionError("option 'valueAvroSubject' needs arrow=true (the values are decoded a batch at a time)")
    if parsed.reader == "direct" and (blockers := parsed.direct_blockers()):
        raise OptionError(f"option 'reader': the direct reader cannot be used with {', '.join(blockers)} "
                          "(reader=auto would use the consumer reader)")
    return parsed


def sink_options(options: Mapping[str, str], streaming: bool = False) -> SinkOptions:
    client = client_options(options)
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic': the topic name is empty")
    exactly_once = _bool(options, "exactlyOnce", streaming)
    if exactly_once and not streaming:
        raise OptionError("option 'exactlyOnce' is for streaming writes (a batch write has no micro-batch to "
                          "commit with)")
    prefix = _get(options, "transactionalIdPrefix") or "strom-spark-"
    include_headers = None if _get(options, "includeHeaders") is None else _bool(options, "includeHeaders", False)
    return SinkOptions(client=client, topic=topic.strip() if topic else None, exactly_once=exactly_once,
                       transactional_id_prefix=prefix, include_headers=include_headers)
