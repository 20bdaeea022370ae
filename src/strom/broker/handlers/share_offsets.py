"""What DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92) and
DeleteGroups (42) share for share groups: they reach each share partition's state through the
persister (Kafka's Persister), at the share coordinator of its key wherever that is (the group
coordinator that answers is not, in general, that broker): ReadShareGroupStateSummary to describe,
InitializeShareGroupState to alter, DeleteShareGroupState to delete. Not a handler itself (no
API_KEY)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.broker.share_host import ClusterPersister, LocalPersister
    from strom.coordinator.group_runtime import GroupCoordinatorRuntime
    from strom.share.manager import SharePartitionManager


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    start_offset: int  # -1: no state
    leader_epoch: int
    lag: int  # -1: not known
    error: E = E.none


async def share_partition_offset(broker: Broker, group_id: str, topic_id: uuid.UUID, topic: str,
                                 partition: int) -> SharePartitionOffset:
    """The share partition's start offset, leader epoch and lag, as Kafka's describeShareGroupOffsets
    makes them: the state's summary from its share coordinator, and lag = the partition's end
    offset (from its leader) - start offset - records after the start already done. A summary that
    cannot be read is absence of data (-1), not an error; an end offset that cannot be read is the
    partition's error."""
    persister, end_offsets = broker.share_persister, broker.share_end_offsets
    if persister is None or end_offsets is None:
        return SharePartitionOffset(-1, 0, -1)
    error, summary = await persister.read_summary(group_id, topic_id, partition)
    if error is not E.none or summary is None or summary.start_offset < 0:
        return SharePartitionOffset(-1, 0, -1)
    if summary.delivery_complete_count < 0:
        return SharePartitionOffset(summary.start_offset, summary.leader_epoch, -1)
    error, end = await end_offsets.latest_offset(topic, partition)
    if error is not E.none:
        return SharePartitionOffset(-1, 0, -1, error)
    lag = end - summary.start_offset - summary.delivery_complete_count
    return SharePartitionOffset(summary.start_offset, summary.leader_epoch, max(lag, 0))


@dataclass(frozen=True, slots=True)
class OffsetsChange:
    """Where a change of a share group's offsets (91, 92) is made: the group's coordinator, the
    persister of the share partitions' state, and this broker's share partitions."""

    coordinator: GroupCoordinatorRuntime
    persister: LocalPersister | ClusterPersister
    partitions: SharePartitionManager


def offsets_change(broker: Broker, ctx: RequestContext, group_id: str,
                   operation: AclOperation) -> OffsetsChange | E:
    """The parts a change of ``group_id``'s offsets uses, or the error for the whole request: the
    group ACL (``operation``), an empty id, no coordinator here, no share groups here."""
    if not broker.acls.allowed(ctx, operation, ResourceType.GROUP, group_id):
        return E.group_authorization_failed
    if not group_id:
        return E.invalid_group_id
    coord, error = coordinator_for(broker, group_id)
    if coord is None:
        return error
    if broker.share_persister is None or broker.share_manager is None:
        return E.coordinator_not_available
    return OffsetsChange(coord, broker.share_persister, broker.share_manager)


async def delete_share_state(change: OffsetsChange, group_id: str,
                             partitions: Iterable[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], E]:
    """Delete the state of the group's share partitions at their share coordinators (Kafka's
    persister deleteState); each one's error. What this broker kept of them is dropped."""
    wanted = list(partitions)
    errors = await asyncio.gather(*(change.persister.delete_state(group_id, t, p) for t, p in wanted))
    for (t, p), e in zip(wanted, errors, strict=True):
        if e is E.none:
            change.partitions.forget(group_id, t, p)
    return dict(zip(wanted, errors, strict=True))
