"""Version-independent requests and answers of the group coordinator.

Handlers translate the kio request of whatever version into these, and these into response dicts;
the state machine sees neither wire versions nor kio.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


def duration_ms(value: datetime.timedelta | int) -> int:
    """kio gives durations as timedelta; the coordinator counts milliseconds."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


@dataclass(frozen=True, slots=True)
class JoinGroupRequestData:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool = False  # JoinGroup v4+: new members first get MEMBER_ID_REQUIRED
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupRequestData:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[tuple[MemberIdentity, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestData:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    partitions: list[OffsetCommitPartition]
    # OffsetCommit's version (None: TxnOffsetCommit): a consumer-protocol member must commit at v9+.
    api_version: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionError:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...] = field(default=())
    dead_reason: str | None = None  # why a Dead group is not described (DescribeGroups v6's error message)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    """A consumer-protocol member as ConsumerGroupDescribe shows it (assignments by topic id)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: dict[uuid.UUID, tuple[int, ...]]
    target_assignment: dict[uuid.UUID, tuple[int, ...]]
    uses_classic_protocol: bool = False  # a member that joined with JoinGroup (online migration)


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()
