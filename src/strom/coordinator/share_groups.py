"""Share groups (KIP-932) in the group coordinator, beside the classic and consumer groups: the
heartbeat, session expiry through the shard's timer queue, describing, listing and deleting
(Kafka's GroupMetadataManager for share groups).

One group id is one type: ShareGroupHeartbeat for a classic or consumer group that exists gets
GROUP_ID_NOT_FOUND ("not a share group"), and classic or consumer requests for a share group are
refused the same way by the shard. A share group commits no offsets: what its members consumed is
the share partitions' state, kept by the share coordinator in __share_group_state.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from strom.coordinator.api import ListedGroup
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import TopicImage
from strom.coordinator.result import Record
from strom.coordinator.share_group import (
    ShareGroup,
    ShareGroupSettings,
    ShareHeartbeatError,
    ShareHeartbeatRequest,
    ShareHeartbeatResponse,
)
from strom.coordinator.share_records import ShareGroupLog
from strom.coordinator.timers import TimerQueue
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.coordinator")

SHARE_MEMBER_TIMER = "share-member"  # (SHARE_MEMBER_TIMER, group id, member id): its session deadline
PROTOCOL_TYPE = "share"


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: dict[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error: E
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = -1
    assignment_epoch: int = -1
    members: tuple[ShareMemberDescription, ...] = ()


def settings_from(config: GroupConfig) -> ShareGroupSettings:
    return ShareGroupSettings(config.share_heartbeat_interval_ms, config.share_session_timeout_ms,
                              config.share_max_size)


class ShareGroupManager:
    def __init__(self, config: GroupConfig, groups: dict[str, ShareGroup], timers: TimerQueue) -> None:
        self.settings = settings_from(config)
        self.groups = groups
        self.timers = timers
        self.log = ShareGroupLog(groups)
        # (group, member) removed since the runtime last looked: their share partitions release
        # what they hold (the share partition manager is told).
        self.removed: list[tuple[str, str]] = []

    def heartbeat(self, now: int, req: ShareHeartbeatRequest, topics: Mapping[str, TopicImage],
                  client: tuple[str, str], other_type: str | None) -> tuple[ShareHeartbeatResponse, list[Record]]:
        """``other_type``: the type of the group of that id if it is not a share group."""
        group = self.groups.get(req.group_id)
        if group is None:
            if other_type is not None:
                raise ShareHeartbeatError(E.group_id_not_found, f"Group {req.group_id} is not a share group.")
            if req.member_epoch != 0:
                raise ShareHeartbeatError(E.unknown_member_id, f"member {req.member_id} is not in group {req.group_id}")
            group = self.groups[req.group_id] = ShareGroup(req.group_id)
            log.info("created share group %s", req.group_id)
        try:
            response = group.heartbeat(req, topics, self.settings, now, client)
        finally:
            if not group.members and req.group_id not in self.log.written:
                del self.groups[req.group_id]  # a failed first join leaves nothing behind
        key = (SHARE_MEMBER_TIMER, req.group_id, req.member_id)
        member = group.members.get(req.member_id)
        if member is None:
            self.timers.cancel(key)
            self.removed.append((req.group_id, req.member_id))
        else:
            self.timers.schedule(key, member.session_deadline)
        return response, self.log.records(req.group_id)

    def on_member_timer(self, now: int, group_id: str, member_id: str) -> list[Record]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return []
        member = group.members[member_id]
        if now < member.session_deadline:
            self.timers.schedule((SHARE_MEMBER_TIMER, group_id, member_id), member.session_deadline)
            return []
        group.remove_member(member_id)
        self.removed.append((group_id, member_id))
        log.info("share group %s: member %s removed after its session timeout; group epoch %d", group_id,
                 member_id, group.group_epoch)
        return self.log.records(group_id)

    def on_loaded(self, now: int, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        self.log.loaded(group_id)
        for member in group.members.values():
            member.session_deadline = now + self.settings.session_timeout_ms
            self.timers.schedule((SHARE_MEMBER_TIMER, group_id, member.member_id), member.session_deadline)

    def take_removed(self) -> list[tuple[str, str]]:
        out, self.removed = self.removed, []
        return out

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str, other_type: str | None) -> DescribedShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            why = f"Group {group_id} is not a share group." if other_type else f"Group {group_id} not found."
            return DescribedShareGroup(group_id, E.group_id_not_found, why)
        members = tuple(ShareMemberDescription(
            m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            tuple(sorted(m.subscribed_topic_names)),
            {t: tuple(sorted(ps)) for t, ps in m.assigned.items() if ps}) for m in group.members.values())
        return DescribedShareGroup(group_id, E.none, None, group.state, group.group_epoch, group.target_epoch, members)

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListedGroup]:
        if types is not None and "share" not in types:
            return []
        return [ListedGroup(g.group_id, PROTOCOL_TYPE, g.state, "share") for g in self.groups.values()
                if states is None or g.state.lower() in states]

    def delete(self, group_id: str) -> tuple[E, list[Record]]:
        """DeleteGroups for a share group: only an empty one (NON_EMPTY_GROUP)."""
        group = self.groups[group_id]
        if group.members:
            return E.non_empty_group, []
        del self.groups[group_id]
        return E.none, self.log.records(group_id)

    # ------------------------------------------------------------------ share-group offsets (APIs 90-92)

    def offsets_error(self, group_id: str, other_type: str | None) -> tuple[E, str | None]:
        """Whether AlterShareGroupOffsets / DeleteShareGroupOffsets may change the group's share
        partitions: only those of an existing, empty share group (Kafka's validateOffsetsAlterable
        and validateDeleteGroup)."""
        group = self.groups.get(group_id)
        if group is None:
            why = f"Group {group_id} is not a share group." if other_type else f"Group {group_id} not found."
            return E.group_id_not_found, why
        if group.members:
            return E.non_empty_group, f"Share group {group_id} is not empty: stop its members first."
        return E.none, None

    def initialized(self, group_id: str) -> dict[uuid.UUID, frozenset[int]] | None:
        """The topic partitions whose share state the group has (None: no such share group)."""
        group = self.groups.get(group_id)
        return None if group is None else dict(group.initialized)

    def change_initialized(self, group_id: str, add: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                           remove: set[uuid.UUID]) -> list[Record]:
        """Offsets altered (``add``: topic id -> name, partitions) or deleted (``remove``): the
        group's ShareGroupStatePartitionMetadata record follows."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        for topic_id, (name, parts) in add.items():
            group.initialized[topic_id] = group.initialized.get(topic_id, frozenset()) | parts
            group.subscribed_names.setdefault(topic_id, name)
        for topic_id in remove:
            group.initialized.pop(topic_id, None)
        return self.log.records(group_id)
