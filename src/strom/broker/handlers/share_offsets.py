"""What DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92)
share: a share partition's start offset and lag as the share coordinator holds its state, and the
per-topic checks (ACL, unknown topic) of the two that change it. Not a handler itself (no API_KEY)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.coordinator.group_runtime import GroupCoordinatorRuntime
    from strom.coordinator.share_runtime import ShareCoordinatorRuntime
    from strom.share.manager import SharePartitionManager

ACKNOWLEDGED, ARCHIVED = 2, 4  # the persisted delivery states of records done with


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    start_offset: int
    leader_epoch: int
    lag: int  # -1: not known here


def share_partition_offset(broker: Broker, group_id: str, topic_id: uuid.UUID, topic: str,
                           partition: int) -> SharePartitionOffset | None:
    """The share partition's start offset, leader epoch and lag (Kafka's: high watermark - start
    offset - records after the start already ACKNOWLEDGED or ARCHIVED); None when it has no state
    (or its state is not readable here)."""
    coordinator = broker.share_coordinator
    if coordinator is None:
        return None
    error, state = coordinator.peek_state(group_id, topic_id, partition)
    if error is not E.none or state is None or state.start_offset < 0:
        return None
    plog, _error, _epoch = broker.leader_log(topic, partition)
    lag = -1
    if plog is not None:
        done = sum(b.last_offset - max(b.first_offset, state.start_offset) + 1 for b in state.batches
                   if b.delivery_state in (ACKNOWLEDGED, ARCHIVED) and b.last_offset >= state.start_offset)
        lag = max(0, plog.high_watermark - state.start_offset - done)
    return SharePartitionOffset(state.start_offset, state.leader_epoch, lag)


@dataclass(frozen=True, slots=True)
class OffsetsChange:
    """Where a change of a share group's offsets (91, 92) is made: the group's coordinator, the
    share coordinator and this broker's share partitions."""

    coordinator: GroupCoordinatorRuntime
    state: ShareCoordinatorRuntime
    partitions: SharePartitionManager


def offsets_change(broker: Broker, ctx: RequestContext, group_id: str,
                   operation: AclOperation) -> OffsetsChange | E:
    """The parts a change of ``group_id``'s offsets uses, or the error for the whole request: the
    group ACL (``operation``), an empty id, no coordinator here, no share state here."""
    if not broker.acls.allowed(ctx, operation, ResourceType.GROUP, group_id):
        return E.group_authorization_failed
    if not group_id:
        return E.invalid_group_id
    coord, error = coordinator_for(broker, group_id)
    if coord is None:
        return error
    if broker.share_coordinator is None or broker.share_manager is None:
        return E.coordinator_not_available
    return OffsetsChange(coord, broker.share_coordinator, broker.share_manager)
