"""The tables: every broker and topic property strom knows, with Kafka's names and defaults.

Defaults follow Apache Kafka 3.9 (the last line with ZooKeeper), except where `kafka_default`
records that strom differs on purpose (an embedded single broker that runs with no arguments).
"""

from __future__ import annotations

from ._defs import (
    LONG_MAX,
    ConfigDef,
    ConfigType,
    Importance,
    KafkaVersion,
    ListOf,
    OneOf,
    OneOfIgnoringCase,
    at_least,
    between,
    index,
)
from .kafka_only import kafka_only_configs

BOOL, STR, INT, SHORT, LONG, DBL, LIST, PWD = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW

_LONG_MAX = str(LONG_MAX)
_INT_MAX = str(2**31 - 1)
_DOUBLE_MAX = "1.7976931348623157E308"
_WEEK_MS = str(7 * 24 * 3600 * 1000)
_DAY_MS = str(24 * 3600 * 1000)

CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# group.consumer.assignors: the built-in assignors by name, and by Kafka's class names.
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                            "org.apache.kafka.coordinator.group.assignor.RangeAssignor")
# group.coordinator.rebalance.protocols: the group types strom's coordinator offers (no share groups).
GROUP_REBALANCE_PROTOCOLS = ("classic", "consumer")
# group.consumer.migration.policy: Kafka's ConsumerGroupMigrationPolicy.
CONSUMER_GROUP_MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# LegacyRecord.RECORD_OVERHEAD_V0: Kafka's floor for a segment size.
MIN_SEGMENT_BYTES = 14
# Kafka 3.x's defaults for the version configs it deprecated (KIP-724) or ignores (KRaft).
MESSAGE_FORMAT_VERSION = "3.0-IV1"
INTER_BROKER_PROTOCOL_VERSION = "3.9-IV0"
_FORMAT_V2_ONLY = ("Kafka 3.0 deprecated it and writes message format v2 whatever it says; "
                   "strom stores and serves v2 only")

# fmt: off
BROKER_CONFIGS: tuple[ConfigDef, ...] = (
    # --- identity and listeners ---
    ConfigDef("broker.id", INT, "0", "Id of this broker; unique within a cluster.", HIGH, at_least(0),
              kafka_default="-1"),
    ConfigDef("node.id", INT, "-1", "KRaft name for the broker id; if set it must equal broker.id (or sets it).",
              LOW, at_least(-1)),
    ConfigDef("listeners", STR, "PLAINTEXT://127.0.0.1:9092",
              "Comma-separated NAME://host:port addresses to listen on; empty host = all interfaces.",
              HIGH, kafka_default="PLAINTEXT://:9092"),
    ConfigDef("advertised.listeners", STR, None,
              "Addresses given to clients in metadata; null = same as listeners.", HIGH),
    ConfigDef("listener.security.protocol.map", STR,
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "Listener name to security protocol, NAME:PROTOCOL pairs.", LOW),
    ConfigDef("inter.broker.listener.name", STR, None,
              "Listener brokers use to talk to each other; null = the one for security.inter.broker.protocol.",
              MEDIUM),
    ConfigDef("security.inter.broker.protocol", STR, "PLAINTEXT", "Security protocol between brokers.",
              MEDIUM, OneOf(SECURITY_PROTOCOLS)),
    ConfigDef("admin.listeners", STR, "http://127.0.0.1:8090",
              "strom only: http://host:port addresses of the admin HTTP server (metrics, REST); empty = off.",
              MEDIUM),
    ConfigDef("admin.allowed.hosts", LIST, "",
              "strom only: host names, besides the admin listener's own, a request to it may name in its "
              "Host header (.example.com = that domain and its subdomains, * = any).", MEDIUM),
    ConfigDef("schema.registry.listeners", STR, "",
              "strom only: http://host:port (or https://) addresses of the schema registry (Confluent's REST "
              "API, stored in the _schemas topic); empty = off.", MEDIUM),
    ConfigDef("broker.rack", STR, None, "Rack of this broker, for rack-aware replica placement.", MEDIUM),
    # --- storage ---
    ConfigDef("log.dirs", STR, None, "Comma-separated data directories; null = log.dir.", HIGH),
    ConfigDef("log.dir", STR, "./strom-data", "Data directory, used when log.dirs is not set.", HIGH,
              kafka_default="/tmp/kafka-logs"),
    ConfigDef("num.partitions", INT, "1", "Partitions of an auto-created or defaulted topic.", MEDIUM,
              at_least(1)),
    ConfigDef("default.replication.factor", INT, "1", "Replication factor of an auto-created topic.", MEDIUM,
              at_least(1)),
    ConfigDef("auto.create.topics.enable", BOOL, "true", "Create a topic when a client asks for an unknown one.",
              HIGH),
    ConfigDef("delete.topic.enable", BOOL, "true", "Allow DeleteTopics.", HIGH),
    ConfigDef("num.recovery.threads.per.data.dir", INT, "1", "Threads per data directory for recovery at start.",
              HIGH, at_least(1)),
    ConfigDef("log.segment.bytes", INT, "1073741824", "Maximum size of one segment file.", HIGH,
              at_least(MIN_SEGMENT_BYTES), topic_config="segment.bytes"),
    ConfigDef("log.roll.ms", LONG, None, "Roll a new segment after this long; null = log.roll.hours.", HIGH,
              at_least(1), topic_config="segment.ms"),
    ConfigDef("log.roll.hours", INT, "168", "Roll a new segment after this many hours.", HIGH, at_least(1),
              topic_config="segment.ms"),
    ConfigDef("log.roll.jitter.ms", LONG, None, "Random jitter subtracted from the roll time; null = hours.", HIGH,
              at_least(0), topic_config="segment.jitter.ms"),
    ConfigDef("log.roll.jitter.hours", INT, "0", "Random jitter subtracted from the roll time, in hours.", HIGH,
              at_least(0), topic_config="segment.jitter.ms"),
    ConfigDef("log.index.size.max.bytes", INT, "10485760", "Maximum size of an offset or time index file.",
              MEDIUM, at_least(4), topic_config="segment.index.bytes"),
    ConfigDef("log.index.interval.bytes", INT, "4096", "Bytes of log between two offset index entries.",
              MEDIUM, at_least(0), topic_config="index.interval.bytes"),
    ConfigDef("log.flush.interval.messages", LONG, _LONG_MAX, "fsync after this many messages are appended.",
              HIGH, at_least(1), topic_config="flush.messages"),
    ConfigDef("log.flush.interval.ms", LONG, None,
              "fsync when data is this old; null = log.flush.scheduler.interval.ms.", HIGH, at_least(0),
              topic_config="flush.ms"),
    ConfigDef("log.flush.scheduler.interval.ms", LONG, _LONG_MAX, "How often to check whether a log needs fsync.",
              HIGH, at_least(0), topic_config="flush.ms"),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", INT, "60000",
              "How often to write the recovery point checkpoint.", HIGH, at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", INT, "60000",
              "How often to write the log start offset checkpoint.", HIGH, at_least(0)),
    ConfigDef("log.retention.ms", LONG, None,
              "Keep data this long (-1 = forever); null = log.retention.minutes.", HIGH,
              topic_config="retention.ms"),
    ConfigDef("log.retention.minutes", INT, None, "Keep data this many minutes; null = log.retention.hours.",
              HIGH, topic_config="retention.ms"),
    ConfigDef("log.retention.hours", INT, "168", "Keep data this many hours (-1 = forever).", HIGH,
              topic_config="retention.ms"),
    ConfigDef("log.retention.bytes", LONG, "-1", "Delete old segments beyond this size per partition; -1 = no limit.",
              HIGH, topic_config="retention.bytes"),
    ConfigDef("log.retention.check.interval.ms", LONG, "300000", "How often retention is enforced.", MEDIUM,
              at_least(1)),
    ConfigDef("log.segment.delete.delay.ms", LONG, "60000", "Wait before deleting a segment file from disk.",
              HIGH, at_least(0), topic_config="file.delete.delay.ms"),
    ConfigDef("log.cleanup.policy", LIST, "delete", "delete and/or compact old segments.", MEDIUM,
              ListOf(CLEANUP_POLICIES), topic_config="cleanup.policy"),
    ConfigDef("log.message.timestamp.type", STR, "CreateTime",
              "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's clock.", MEDIUM,
              OneOf(TIMESTAMP_TYPES), topic_config="message.timestamp.type"),
    ConfigDef("log.message.timestamp.difference.max.ms", LONG, _LONG_MAX,
              "Deprecated: reject CreateTime this far from the broker's clock.", MEDIUM, at_least(0),
              topic_config="message.timestamp.difference.max.ms"),
    ConfigDef("log.message.timestamp.before.max.ms", LONG, _LONG_MAX,
              "Reject a CreateTime this far before the broker's clock.", MEDIUM, at_least(0),
              topic_config="message.timestamp.before.max.ms"),
    ConfigDef("log.message.timestamp.after.max.ms", LONG, _LONG_MAX,
              "Reject a CreateTime this far after the broker's clock.", MEDIUM, at_least(0),
              topic_config="message.timestamp.after.max.ms"),
    ConfigDef("log.preallocate", BOOL, "false", "Preallocate segment files.", MEDIUM,
              topic_config="preallocate", ignored=True),
    ConfigDef("log.message.downconversion.enable", BOOL, "true",
              "Down-convert batches for old fetchers (strom stores and serves magic v2 only).", LOW,
              topic_config="message.downconversion.enable", ignored=True),
    ConfigDef("log.message.format.version", STR, MESSAGE_FORMAT_VERSION,
              "Deprecated: message format version of appended batches (always v2).", MEDIUM, KafkaVersion(),
              topic_config="message.format.version", ignored=True, deprecated=_FORMAT_V2_ONLY),
    ConfigDef("message.max.bytes", INT, "1048588", "Largest record batch the broker accepts.", HIGH,
              at_least(0), topic_config="max.message.bytes"),
    ConfigDef("compression.type", STR, "producer",
              "Compression of stored batches; producer = keep what the producer sent.", HIGH,
              OneOf(COMPRESSION_TYPES), topic_config="compression.type"),
    ConfigDef("min.insync.replicas", INT, "1", "In-sync replicas an acks=all write needs.", HIGH, at_least(1),
              topic_config="min.insync.replicas"),
    ConfigDef("unclean.leader.election.enable", BOOL, "false",
              "Allow an out-of-sync replica to become leader (may lose data).", HIGH,
              topic_config="unclean.leader.election.enable"),
    # --- log cleaner (compaction) ---
    ConfigDef("log.cleaner.enable", BOOL, "true", "Run the log cleaner (needed for compacted topics).", MEDIUM),
    ConfigDef("log.cleaner.threads", INT, "1", "Threads that compact logs.", MEDIUM, at_least(0)),
    ConfigDef("log.cleaner.backoff.ms", LONG, "15000", "Sleep when there is nothing to clean.", MEDIUM,
              at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", LONG, "134217728", "Memory for compaction's key map.", MEDIUM),
    ConfigDef("log.cleaner.io.buffer.size", INT, "524288", "I/O buffer memory for the cleaner.", MEDIUM,
              at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", DBL, "0.9", "Load factor of the dedupe buffer.", MEDIUM),
    ConfigDef("log.cleaner.io.max.bytes.per.second", DBL, _DOUBLE_MAX, "Throttle on cleaner I/O.", MEDIUM),
    ConfigDef("log.cleaner.delete.retention.ms", LONG, _DAY_MS,
              "Keep tombstones in compacted topics this long.", MEDIUM, at_least(0),
              topic_config="delete.retention.ms"),
    ConfigDef("log.cleaner.min.cleanable.ratio", DBL, "0.5",
              "Dirty/total ratio at which a log becomes eligible for compaction.", MEDIUM, between(0, 1),
              topic_config="min.cleanable.dirty.ratio"),
    ConfigDef("log.cleaner.min.compaction.lag.ms", LONG, "0", "Leave records uncompacted at least this long.",
              MEDIUM, at_least(0), topic_config="min.compaction.lag.ms"),
    ConfigDef("log.cleaner.max.compaction.lag.ms", LONG, _LONG_MAX, "Compact records at the latest after this long.",
              MEDIUM, at_least(1), topic_config="max.compaction.lag.ms"),
    # --- network ---
    ConfigDef("socket.request.max.bytes", INT, "104857600", "Largest request the broker reads.", HIGH,
              at_least(1)),
    ConfigDef("socket.send.buffer.bytes", INT, "102400", "SO_SNDBUF of accepted sockets; -1 = OS default.", HIGH),
    ConfigDef("socket.receive.buffer.bytes", INT, "102400", "SO_RCVBUF of accepted sockets; -1 = OS default.",
              HIGH),
    ConfigDef("socket.listen.backlog.size", INT, "50", "Listen backlog of server sockets.", MEDIUM, at_least(1)),
    ConfigDef("connections.max.idle.ms", LONG, "600000",
              "Close a client connection that has sent nothing and been sent nothing for this long; "
              "negative = never.", MEDIUM),
    ConfigDef("max.connections", INT, _INT_MAX,
              "Most client connections the broker holds; at the limit it accepts a new one only when another "
              "closes (per listener too, as listener.name.<listener>.max.connections).", MEDIUM, at_least(0)),
    ConfigDef("max.connections.per.ip", INT, _INT_MAX,
              "Most connections from one address; a connection beyond it is closed as soon as it is accepted. "
              "0 only with max.connections.per.ip.overrides.", MEDIUM, at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", STR, "",
              "host:count pairs, comma-separated, that replace max.connections.per.ip for those addresses "
              "(host names are resolved at start), e.g. 10.0.0.7:500,monitor.example:5.", MEDIUM),
    ConfigDef("connection.failed.authentication.delay.ms", INT, "100",
              "A failed SASL authentication is answered, and its connection closed, only this long after "
              "the failure; must be less than connections.max.idle.ms.", LOW, at_least(0)),
    ConfigDef("fetch.max.bytes", INT, "57671680",
              "Cap on one fetch response (with the request's max_bytes); the first batch of the first "
              "partition with data goes out whole however large (KIP-74).", MEDIUM, at_least(1024)),
    ConfigDef("max.incremental.fetch.session.cache.slots", INT, "1000",
              "Fetch sessions (KIP-227) the broker keeps: incremental fetches list only the partitions "
              "that changed, and are answered with only those that have something to say; 0 turns "
              "sessions off.", MEDIUM, at_least(0)),
    ConfigDef("queued.max.requests", INT, "500", "Requests queued before the network threads block.", HIGH,
              at_least(1), ignored=True),
    ConfigDef("queued.max.request.bytes", LONG, "-1", "Bytes of queued requests before reading stops.", MEDIUM,
              ignored=True),
    ConfigDef("num.network.threads", INT, "3", "Network threads (strom: one event loop).", HIGH, at_least(1),
              ignored=True),
    ConfigDef("num.io.threads", INT, "8", "Request handler threads (strom: one event loop).", HIGH, at_least(1),
              ignored=True),
    ConfigDef("background.threads", INT, "10", "Background task threads.", HIGH, at_least(1), ignored=True),
    # --- groups and offsets ---
    ConfigDef("group.initial.rebalance.delay.ms", INT, "3000",
              "Wait this long for more members before the first rebalance of an empty group.", MEDIUM,
              at_least(0)),
    ConfigDef("group.min.session.timeout.ms", INT, "6000", "Smallest session timeout a member may ask for.",
              MEDIUM),
    ConfigDef("group.max.session.timeout.ms", INT, "1800000", "Largest session timeout a member may ask for.",
              MEDIUM),
    ConfigDef("group.max.size", INT, _INT_MAX, "Most members in one consumer group.", MEDIUM, at_least(1)),
    # --- consumer-protocol groups (KIP-848) ---
    ConfigDef("group.coordinator.rebalance.protocols", LIST, "classic,consumer",
              "Group protocols the coordinator serves; must contain classic. Without consumer, "
              "ConsumerGroupHeartbeat and ConsumerGroupDescribe are not offered (UNSUPPORTED_VERSION).",
              MEDIUM, ListOf(GROUP_REBALANCE_PROTOCOLS)),
    ConfigDef("group.consumer.migration.policy", STR, "bidirectional",
              "Online migration of a group between the classic and the consumer protocol: upgrade (a "
              "consumer-protocol member joining a classic group converts it), downgrade (the last one "
              "leaving converts it back), bidirectional (both) or disabled. Case-insensitive.", MEDIUM,
              OneOfIgnoringCase(CONSUMER_GROUP_MIGRATION_POLICIES)),
    ConfigDef("group.consumer.session.timeout.ms", INT, "45000",
              "Session timeout of a consumer-protocol member: silent this long, it is removed and its "
              "partitions go to the others. Within group.consumer.min/max.session.timeout.ms.", MEDIUM,
              at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", INT, "45000",
              "Smallest allowed group.consumer.session.timeout.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", INT, "60000",
              "Largest allowed group.consumer.session.timeout.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", INT, "5000",
              "How often a consumer-protocol member heartbeats (told in each ConsumerGroupHeartbeat "
              "answer); less than group.consumer.session.timeout.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", INT, "5000",
              "Smallest allowed group.consumer.heartbeat.interval.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", INT, "15000",
              "Largest allowed group.consumer.heartbeat.interval.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.consumer.max.size", INT, _INT_MAX,
              "Most members in one consumer-protocol group (GROUP_MAX_SIZE_REACHED beyond).", MEDIUM,
              at_least(1)),
    ConfigDef("group.consumer.assignors", LIST, "uniform,range",
              "Server-side assignors of consumer-protocol groups, by name (or Kafka's class name); the "
              "first is used when the members ask for none (group.remote.assignor).", MEDIUM,
              ListOf(CONSUMER_GROUP_ASSIGNORS)),
    # --- share groups (KIP-932) ---
    ConfigDef("group.share.session.timeout.ms", INT, "45000",
              "Session timeout of a share group member: silent this long, it is removed and its acquired "
              "records become available again. Within group.share.min/max.session.timeout.ms.", MEDIUM,
              at_least(1)),
    ConfigDef("group.share.min.session.timeout.ms", INT, "45000",
              "Smallest allowed group.share.session.timeout.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", INT, "60000",
              "Largest allowed group.share.session.timeout.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", INT, "5000",
              "How often a share group member heartbeats; less than group.share.session.timeout.ms.", MEDIUM,
              at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", INT, "5000",
              "Smallest allowed group.share.heartbeat.interval.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", INT, "15000",
              "Largest allowed group.share.heartbeat.interval.ms.", MEDIUM, at_least(1)),
    ConfigDef("group.share.max.size", INT, "200", "Most members in one share group (GROUP_MAX_SIZE_REACHED "
              "beyond).", MEDIUM, between(1, 1000)),
    ConfigDef("group.share.record.lock.duration.ms", INT, "30000",
              "How long a share group member holds the records it acquired before they are offered again. "
              "Within group.share.min/max.record.lock.duration.ms; a group may set its own "
              "(share.record.lock.duration.ms).", MEDIUM, between(1000, 3600000)),
    ConfigDef("group.share.min.record.lock.duration.ms", INT, "15000",
              "Smallest allowed record lock duration.", MEDIUM, between(1000, 30000)),
    ConfigDef("group.share.max.record.lock.duration.ms", INT, "60000",
              "Largest allowed record lock duration.", MEDIUM, between(30000, 3600000)),
    ConfigDef("group.share.delivery.count.limit", INT, "5",
              "A record delivered this many times is archived when it is released again, never "
              "delivered once more.", MEDIUM, between(2, 10)),
    ConfigDef("group.share.partition.max.record.locks", INT, "2000",
              "Most records of one share partition in flight between its start offset and its end.", MEDIUM,
              between(100, 10000)),
    ConfigDef("group.share.max.share.sessions", INT, "2000",
              "Most share sessions this broker keeps (SHARE_SESSION_LIMIT_REACHED beyond).", MEDIUM,
              at_least(1)),
    ConfigDef("share.coordinator.state.topic.num.partitions", INT, "1",
              "Partitions of __share_group_state (fixed once the topic exists).", HIGH, at_least(1),
              kafka_default="50"),
    ConfigDef("share.coordinator.state.topic.replication.factor", SHORT, "3",
              "Replication factor of __share_group_state (at most the live brokers: 1 on a broker of its "
              "own).", HIGH, at_least(1)),
    ConfigDef("share.coordinator.state.topic.min.isr", SHORT, "2",
              "min.insync.replicas of __share_group_state (at most its replication factor).", HIGH,
              at_least(1)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", INT, "104857600",
              "Segment size of __share_group_state.", HIGH, at_least(1)),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", INT, "500",
              "ShareUpdate records written for a share partition before its state is written whole again "
              "(a ShareSnapshot).", MEDIUM, between(0, 500)),
    ConfigDef("share.coordinator.write.timeout.ms", INT, "5000",
              "How long a write of share state waits for the replicas of __share_group_state.", MEDIUM,
              at_least(1)),
    ConfigDef("offsets.topic.num.partitions", INT, "1",
              "Partitions of __consumer_offsets (fixed once the topic exists).", HIGH, at_least(1),
              kafka_default="50"),
    ConfigDef("offsets.topic.replication.factor", SHORT, "1", "Replication factor of __consumer_offsets.", HIGH,
              at_least(1), kafka_default="3"),
    ConfigDef("offsets.topic.segment.bytes", INT, "104857600", "Segment size of __consumer_offsets.", HIGH,
              at_least(1)),
    ConfigDef("offsets.load.buffer.size", INT, "5242880", "Read buffer for loading offsets into the cache.",
              HIGH, at_least(1)),
    ConfigDef("offsets.retention.minutes", INT, "10080",
              "Forget a group's committed offsets this long after it became empty.", HIGH, at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", LONG, "600000", "How often stale offsets are removed.", HIGH,
              at_least(1)),
    ConfigDef("offsets.commit.timeout.ms", INT, "5000", "Time limit for an offset commit to be replicated.", HIGH,
              at_least(1)),
    ConfigDef("offset.metadata.max.bytes", INT, "4096", "Largest metadata string of an offset commit.", HIGH),
    # --- transactions and idempotence ---
    ConfigDef("transaction.state.log.num.partitions", INT, "1",
              "Partitions of __transaction_state (fixed once the topic exists).", HIGH, at_least(1),
              kafka_default="50"),
    ConfigDef("transaction.state.log.replication.factor", SHORT, "1", "Replication factor of __transaction_state.",
              HIGH, at_least(1), kafka_default="3"),
    ConfigDef("transaction.state.log.min.isr", INT, "1", "min.insync.replicas of __transaction_state.", HIGH,
              at_least(1), kafka_default="2"),
    ConfigDef("transaction.state.log.segment.bytes", INT, "104857600", "Segment size of __transaction_state.",
              HIGH, at_least(1)),
    ConfigDef("transactional.id.expiration.ms", INT, "604800000",
              "Forget an idle transactional id after this long.", HIGH, at_least(1)),
    ConfigDef("transaction.max.timeout.ms", INT, "900000", "Largest transaction timeout a producer may ask for.",
              HIGH, at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000",
              "How often timed-out transactions are rolled back.", LOW, at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000",
              "How often expired transactional ids are removed.", LOW, at_least(1)),
    ConfigDef("producer.id.expiration.ms", INT, _DAY_MS, "Forget an idle producer id's state after this long.",
              LOW, at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", INT, "600000",
              "How often partitions forget the producer ids idle past producer.id.expiration.ms.", LOW,
              at_least(1)),
    # --- replication and cluster ---
    ConfigDef("replica.lag.time.max.ms", LONG, "30000", "A follower this far behind leaves the ISR.", HIGH),
    ConfigDef("replica.fetch.max.bytes", INT, "1048576", "Bytes per partition a follower fetches.", MEDIUM,
              at_least(0)),
    ConfigDef("replica.fetch.min.bytes", INT, "1", "Least data a follower fetch waits for.", HIGH),
    ConfigDef("replica.fetch.wait.max.ms", INT, "500", "Longest wait of a follower fetch.", MEDIUM),
    ConfigDef("replica.fetch.backoff.ms", INT, "1000", "Sleep after a failed follower fetch.", MEDIUM,
              at_least(0)),
    ConfigDef("replica.fetch.response.max.bytes", INT, "10485760", "Cap on one follower fetch response.",
              MEDIUM, at_least(0)),
    ConfigDef("replica.socket.timeout.ms", INT, "30000", "Socket timeout of follower fetches.", HIGH),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", LONG, "5000",
              "How often high watermarks are checkpointed.", HIGH),
    ConfigDef("num.replica.fetchers", INT, "1",
              "Fetchers (each its own connection) per leader broker a follower copies from.", HIGH, at_least(1)),
    ConfigDef("auto.leader.rebalance.enable", BOOL, "true", "Move leadership back to preferred replicas.", HIGH),
    ConfigDef("leader.imbalance.check.interval.seconds", LONG, "300",
              "How often the controller checks whether leaders should move back to preferred replicas.", HIGH,
              at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", INT, "10",
              "Share of a broker's preferred partitions led elsewhere that triggers moving them back.", HIGH,
              at_least(0)),
    ConfigDef("controlled.shutdown.enable", BOOL, "true", "Hand over leadership before shutting down.", MEDIUM),
    ConfigDef("inter.broker.protocol.version", STR, INTER_BROKER_PROTOCOL_VERSION,
              "Protocol version between brokers, for rolling upgrades; Kafka 3.x uses it in ZooKeeper mode only.",
              MEDIUM, KafkaVersion(), ignored=True,
              deprecated="strom negotiates each request's version with ApiVersions, as Kafka does in KRaft "
                         "mode, where it ignores this key"),
    ConfigDef("zookeeper.connect", STR, None, "host:port[,host:port][/chroot] of ZooKeeper; null = single broker.",
              HIGH),
    ConfigDef("zookeeper.session.timeout.ms", INT, "18000", "ZooKeeper session timeout.", HIGH, at_least(1)),
    ConfigDef("zookeeper.connection.timeout.ms", INT, None,
              "Wait this long to connect to ZooKeeper; null = zookeeper.session.timeout.ms.", HIGH, at_least(1)),
    # --- security ---
    ConfigDef("ssl.keystore.type", STR, "JKS", "Format of the key store file.", MEDIUM),
    ConfigDef("ssl.keystore.location", STR, None, "Key store (certificate and private key) file.", HIGH),
    ConfigDef("ssl.keystore.password", PWD, None, "Password of the key store file.", HIGH),
    ConfigDef("ssl.key.password", PWD, None, "Password of the private key.", HIGH),
    ConfigDef("ssl.keystore.certificate.chain", PWD, None, "PEM certificate chain, inline.", HIGH),
    ConfigDef("ssl.keystore.key", PWD, None, "PEM private key, inline.", HIGH),
    ConfigDef("ssl.truststore.type", STR, "JKS", "Format of the trust store file.", MEDIUM),
    ConfigDef("ssl.truststore.location", STR, None, "Trust store (CA certificates) file.", HIGH),
    ConfigDef("ssl.truststore.password", PWD, None, "Password of the trust store file.", HIGH),
    ConfigDef("ssl.truststore.certificates", PWD, None, "PEM CA certificates, inline.", HIGH),
    ConfigDef("ssl.client.auth", STR, "none", "Ask clients for certificates: required, requested or none.",
              MEDIUM, OneOf(("required", "requested", "none"))),
    ConfigDef("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted.", MEDIUM),
    ConfigDef("ssl.protocol", STR, "TLSv1.3", "TLS protocol used to build the SSL context.", MEDIUM),
    ConfigDef("ssl.endpoint.identification.algorithm", STR, "https",
              "Check the peer's host name against its certificate (https) or not (empty).", LOW),
    ConfigDef("ssl.cipher.suites", LIST, "",
              "TLS 1.2 cipher suites (OpenSSL names) the listener allows; empty = OpenSSL's secure defaults.",
              LOW),
    ConfigDef("ssl.principal.mapping.rules", STR, "DEFAULT",
              "Rules mapping a client certificate's subject DN to a principal name (RULE:pattern/replacement/[LU]).",
              LOW),
    ConfigDef("connections.max.reauth.ms", LONG, "0",
              "A SASL session lasts at most this long before the client must re-authenticate; 0 = forever.",
              MEDIUM, at_least(0)),
    ConfigDef("sasl.server.max.receive.size", INT, "524288",
              "Largest request accepted on a SASL listener before the client has authenticated.", LOW,
              at_least(1)),
    ConfigDef("sasl.enabled.mechanisms", LIST, "GSSAPI", "SASL mechanisms the broker offers.", MEDIUM),
    ConfigDef("sasl.mechanism.inter.broker.protocol", STR, "GSSAPI", "SASL mechanism between brokers.", MEDIUM),
    ConfigDef("sasl.jaas.config", PWD, None, "JAAS login configuration (credentials).", MEDIUM),
    ConfigDef("quota.window.num", INT, "11", "Samples of the windowed rate client quotas are measured with.",
              LOW, at_least(1)),
    ConfigDef("quota.window.size.seconds", INT, "1", "Length of one client quota sample.", LOW, at_least(1)),
    ConfigDef("authorizer.class.name", STR, "", "Authorizer; empty = no ACL checks.", LOW),
    ConfigDef("super.users", STR, None, "Principals that bypass ACLs, separated by ';' (User:alice;User:bob).",
              LOW),
    ConfigDef("allow.everyone.if.no.acl.found", BOOL, "false",
              "With an authorizer, allow access to resources that have no ACL.", LOW),
    # --- KRaft, accepted so KRaft server.properties files load ---
    ConfigDef("process.roles", LIST, "",
              "KRaft roles: empty or broker (strom is a broker; it cannot be a KRaft controller).", HIGH,
              ListOf(("broker",), allow_empty=True, note="strom cannot be a KRaft controller")),
    ConfigDef("controller.quorum.voters", LIST, "", "KRaft controller quorum.", HIGH, ignored=True),
    ConfigDef("controller.listener.names", STR, None, "KRaft controller listener names.", HIGH, ignored=True),
)

TOPIC_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("cleanup.policy", LIST, "delete", "delete and/or compact old segments.", MEDIUM,
              ListOf(CLEANUP_POLICIES), synonyms=("log.cleanup.policy",)),
    ConfigDef("compression.type", STR, "producer",
              "Compression of stored batches; producer = keep what the producer sent.", MEDIUM,
              OneOf(COMPRESSION_TYPES), synonyms=("compression.type",)),
    ConfigDef("delete.retention.ms", LONG, _DAY_MS, "Keep tombstones in compacted topics this long.", MEDIUM,
              at_least(0), synonyms=("log.cleaner.delete.retention.ms",)),
    ConfigDef("file.delete.delay.ms", LONG, "60000", "Wait before deleting a segment file from disk.", MEDIUM,
              at_least(0), synonyms=("log.segment.delete.delay.ms",)),
    ConfigDef("flush.messages", LONG, _LONG_MAX, "fsync after this many messages are appended.", MEDIUM,
              at_least(1), synonyms=("log.flush.interval.messages",)),
    ConfigDef("flush.ms", LONG, _LONG_MAX, "fsync when data is this old.", MEDIUM, at_least(0),
              synonyms=("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    ConfigDef("follower.replication.throttled.replicas", LIST, "",
              "Replicas throttled on the follower side (partition:broker,...).", MEDIUM, ignored=True),
    ConfigDef("index.interval.bytes", INT, "4096", "Bytes of log between two offset index entries.", MEDIUM,
              at_least(0), synonyms=("log.index.interval.bytes",)),
    ConfigDef("leader.replication.throttled.replicas", LIST, "",
              "Replicas throttled on the leader side (partition:broker,...).", MEDIUM, ignored=True),
    ConfigDef("max.compaction.lag.ms", LONG, _LONG_MAX, "Compact records at the latest after this long.", MEDIUM,
              at_least(1), synonyms=("log.cleaner.max.compaction.lag.ms",)),
    ConfigDef("max.message.bytes", INT, "1048588", "Largest record batch the topic accepts.", MEDIUM,
              at_least(0), synonyms=("message.max.bytes",)),
    ConfigDef("message.downconversion.enable", BOOL, "true", "Down-convert batches for old fetchers.", LOW,
              synonyms=("log.message.downconversion.enable",), ignored=True),
    ConfigDef("message.format.version", STR, MESSAGE_FORMAT_VERSION,
              "Deprecated: message format version of appended batches (always v2).", MEDIUM, KafkaVersion(),
              synonyms=("log.message.format.version",), ignored=True, deprecated=_FORMAT_V2_ONLY),
    ConfigDef("message.timestamp.after.max.ms", LONG, _LONG_MAX, "Reject a CreateTime this far in the future.",
              MEDIUM, at_least(0), synonyms=("log.message.timestamp.after.max.ms",)),
    ConfigDef("message.timestamp.before.max.ms", LONG, _LONG_MAX, "Reject a CreateTime this far in the past.",
              MEDIUM, at_least(0), synonyms=("log.message.timestamp.before.max.ms",)),
    ConfigDef("message.timestamp.difference.max.ms", LONG, _LONG_MAX,
              "Deprecated: reject CreateTime this far from the broker's clock.", MEDIUM, at_least(0),
              synonyms=("log.message.timestamp.difference.max.ms",)),
    ConfigDef("message.timestamp.type", STR, "CreateTime", "CreateTime or LogAppendTime.", MEDIUM,
              OneOf(TIMESTAMP_TYPES), synonyms=("log.message.timestamp.type",)),
    ConfigDef("min.cleanable.dirty.ratio", DBL, "0.5", "Dirty/total ratio at which compaction starts.", MEDIUM,
              between(0, 1), synonyms=("log.cleaner.min.cleanable.ratio",)),
    ConfigDef("min.compaction.lag.ms", LONG, "0", "Leave records uncompacted at least this long.", MEDIUM,
              at_least(0), synonyms=("log.cleaner.min.compaction.lag.ms",)),
    ConfigDef("min.insync.replicas", INT, "1", "In-sync replicas an acks=all write needs.", MEDIUM, at_least(1),
              synonyms=("min.insync.replicas",)),
    ConfigDef("preallocate", BOOL, "false", "Preallocate segment files.", MEDIUM, synonyms=("log.preallocate",),
              ignored=True),
    ConfigDef("retention.bytes", LONG, "-1", "Delete old segments beyond this size per partition; -1 = no limit.",
              MEDIUM, synonyms=("log.retention.bytes",)),
    ConfigDef("retention.ms", LONG, _WEEK_MS, "Keep data this long; -1 = forever.", MEDIUM, at_least(-1),
              synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    ConfigDef("segment.bytes", INT, "1073741824", "Maximum size of one segment file.", MEDIUM,
              at_least(MIN_SEGMENT_BYTES), synonyms=("log.segment.bytes",)),
    ConfigDef("segment.index.bytes", INT, "10485760", "Maximum size of an offset or time index file.", MEDIUM,
              at_least(4), synonyms=("log.index.size.max.bytes",)),
    ConfigDef("segment.jitter.ms", LONG, "0", "Random jitter subtracted from the roll time.", MEDIUM, at_least(0),
              synonyms=("log.roll.jitter.ms", "log.roll.jitter.hours")),
    ConfigDef("segment.ms", LONG, _WEEK_MS, "Roll a new segment after this long.", MEDIUM, at_least(1),
              synonyms=("log.roll.ms", "log.roll.hours")),
    ConfigDef("unclean.leader.election.enable", BOOL, "false",
              "Allow an out-of-sync replica to become leader (may lose data).", MEDIUM,
              synonyms=("unclean.leader.election.enable",)),
)
# fmt: on

# Kafka's broker keys strom has no feature for (kafka_only.py): accepted, stored and described; at
# Kafka's default only, unless inert (KAFKA_ONLY_REFUSALS says why another value is refused).
KAFKA_ONLY_CONFIGS, KAFKA_ONLY_MODES, KAFKA_ONLY_REFUSALS = kafka_only_configs({d.name for d in BROKER_CONFIGS})

# Every broker key: strom's, then Kafka's others.
BROKER_DEFS: dict[str, ConfigDef] = index(BROKER_CONFIGS + KAFKA_ONLY_CONFIGS)
TOPIC_DEFS: dict[str, ConfigDef] = index(TOPIC_CONFIGS)

# Broker properties that AlterConfigs / IncrementalAlterConfigs may change at runtime (Kafka's
# DynamicBrokerConfig, as far as strom acts on them): the defaults of topic configs and the cleaner.
# Like Kafka's DynamicLogConfig, not log.message.format.version (nor any deprecated key).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {d.name for d in BROKER_CONFIGS if d.topic_config is not None and d.deprecated is None}
    | {
        "log.cleaner.threads",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.max.bytes.per.second",
    }
    # Kafka-only keys Kafka can change at runtime (values are held to the same rule as at start).
    | {name for name, mode in KAFKA_ONLY_MODES.items() if mode != "read-only"}
)
# Of those, the ones Kafka lets only a broker's own level set (not the cluster-wide default, "").
PER_BROKER_CONFIGS: frozenset[str] = frozenset(name for name, mode in KAFKA_ONLY_MODES.items() if mode == "per-broker")

# Keys not in the table that are still expected in a server.properties: per-listener settings
# (listener.name.<listener>.<config>) are read by the security layer from BrokerConfig.raw.
KNOWN_PREFIXES: tuple[str, ...] = ("listener.name.",)
