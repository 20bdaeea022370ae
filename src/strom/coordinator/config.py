"""The coordinators' settings: a static copy of the broker's (Kafka's names in the comments). The
defaults are config/'s; the dataclass defaults below serve tests of the pure shards only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.coordinator.txn_shard import TxnConfig

if TYPE_CHECKING:
    from strom.config import BrokerConfig

INT_MAX = 2**31 - 1
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
# Kafka's Topic.INTERNAL_TOPICS: only the coordinators write them (and replay them at load), so a
# client's Produce and DeleteRecords on them are refused with INVALID_TOPIC_EXCEPTION, as in Kafka.
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME})


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = INT_MAX  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    # A new member's JoinGroup is parked at most this long (Kafka's NewMemberJoinTimeoutMs): it has
    # no member id yet, so it cannot heartbeat and a dead one would otherwise block the rebalance.
    new_member_join_timeout_ms: int = 300_000
    # Consumer-protocol groups (KIP-848): what ConsumerGroup applies (ConsumerGroupSettings).
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = INT_MAX  # group.consumer.max.size
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors (by name)
    # group.coordinator.rebalance.protocols: "consumer" absent, ConsumerGroupHeartbeat is not served.
    rebalance_protocols: frozenset[str] = frozenset({"classic", "consumer"})
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy (lower case)
    # Share groups (KIP-932): what ShareGroup applies (ShareGroupSettings).
    share_session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    share_heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    share_max_size: int = 200  # group.share.max.size

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            consumer_max_size=config.group_consumer_max_size,
            consumer_assignors=tuple(dict.fromkeys(_assignor_name(a) for a in config.group_consumer_assignors)),
            rebalance_protocols=frozenset(config.group_coordinator_rebalance_protocols),
            consumer_migration_policy=config.group_consumer_migration_policy.lower(),
            share_session_timeout_ms=config.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
            share_max_size=config.group_share_max_size,
        )


def _assignor_name(name: str) -> str:
    """group.consumer.assignors lists names or Kafka's class names; the groups know the names."""
    return {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}.get(name, name)


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A coordinator's internal topic and how it is made on first use."""

    name: str
    num_partitions: int  # until the topic exists; then the topic's own count (fixed once made)
    replication_factor: int  # in a cluster; a broker on its own makes it with 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupRuntimeConfig:
    groups: GroupConfig
    topic: InternalTopic
    commit_timeout_ms: int  # offsets.commit.timeout.ms: how long a write waits for the ISR

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupRuntimeConfig:
        return cls(
            groups=GroupConfig.from_broker_config(config),
            topic=InternalTopic(
                GROUP_METADATA_TOPIC_NAME,
                config.offsets_topic_num_partitions,  # offsets.topic.num.partitions
                config.offsets_topic_replication_factor,  # offsets.topic.replication.factor
                {"cleanup.policy": "compact",
                 "segment.bytes": str(config.offsets_topic_segment_bytes)}),  # offsets.topic.segment.bytes
            commit_timeout_ms=config.offsets_commit_timeout_ms,
        )


@dataclass(frozen=True, slots=True)
class TxnRuntimeConfig:
    txns: TxnConfig
    topic: InternalTopic
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TxnRuntimeConfig:
        return cls(
            txns=TxnConfig(config.transaction_max_timeout_ms,  # transaction.max.timeout.ms
                           config.transactional_id_expiration_ms),  # transactional.id.expiration.ms
            topic=InternalTopic(
                TRANSACTION_STATE_TOPIC_NAME,
                config.transaction_state_log_num_partitions,  # transaction.state.log.num.partitions
                config.transaction_state_log_replication_factor,  # transaction.state.log.replication.factor
                {"cleanup.policy": "compact",
                 "min.insync.replicas": str(config.transaction_state_log_min_isr),
                 "segment.bytes": str(config.transaction_state_log_segment_bytes)}),
            abort_timed_out_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_interval_ms=config.transaction_remove_expired_transaction_cleanup_interval_ms,
        )


def share_runtime_topic(config: BrokerConfig) -> InternalTopic:
    """__share_group_state as Kafka makes it (share.coordinator.state.topic.*): compacted, its
    min.insync.replicas never above the replication factor it gets."""
    return InternalTopic(
        SHARE_GROUP_STATE_TOPIC_NAME,
        config.share_coordinator_state_topic_num_partitions,
        config.share_coordinator_state_topic_replication_factor,
        {"cleanup.policy": "compact",
         "min.insync.replicas": str(config.share_coordinator_state_topic_min_isr),
         "segment.bytes": str(config.share_coordinator_state_topic_segment_bytes)})
