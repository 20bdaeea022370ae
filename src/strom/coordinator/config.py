"""The group coordinator's settings, taken from the broker's (Kafka's names in the comments)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT_MAX = 2**31 - 1


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

    @classmethod
    def from_broker_config(cls, config: Any) -> GroupConfig:
        d = cls()
        return cls(
            initial_rebalance_delay_ms=getattr(config, "group_initial_rebalance_delay_ms", d.initial_rebalance_delay_ms),
            min_session_timeout_ms=getattr(config, "group_min_session_timeout_ms", d.min_session_timeout_ms),
            max_session_timeout_ms=getattr(config, "group_max_session_timeout_ms", d.max_session_timeout_ms),
            max_size=getattr(config, "group_max_size", d.max_size),
            offsets_retention_ms=getattr(config, "offsets_retention_minutes", 7 * 24 * 60) * 60_000,
            offsets_retention_check_interval_ms=getattr(config, "offsets_retention_check_interval_ms",
                                                        d.offsets_retention_check_interval_ms),
            offset_metadata_max_bytes=getattr(config, "offset_metadata_max_bytes", d.offset_metadata_max_bytes),
        )
