"""GroupCoordinatorShard: the whole group coordinator as one pure state machine.

Every operation takes the time (ms) and returns a CoordinatorResult. ``replay`` rebuilds the state
from __consumer_offsets records at start; ``tick`` fires expired timers (session timeouts,
rebalance deadlines, offset retention). One instance serves every __consumer_offsets partition of
this broker (a single broker leads them all).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from strom.coordinator import records as rec
from strom.coordinator import share_records as srec
from strom.coordinator.api import (
    DescribedConsumerGroup,
    DescribedGroup,
    FetchedOffset,
    JoinGroupRequestData,
    JoinGroupResult,
    ListedGroup,
    MemberDescription,
    MemberIdentity,
    OffsetCommitRequestData,
    SyncGroupRequestData,
)
from strom.coordinator.classic import ClassicGroupManager
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import (
    ConsumerGroup,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicImage,
)
from strom.coordinator.consumer_group_log import ConsumerGroupLog
from strom.coordinator.consumer_groups import MEMBER_TIMER, ConsumerGroupManager
from strom.coordinator.group import ClassicGroup, GroupState, Token, TopicPartition
from strom.coordinator.migration import GroupMigration
from strom.coordinator.offsets import OffsetManager
from strom.coordinator.reconciliation import LEAVE_EPOCH
from strom.coordinator.result import CoordinatorResult, Record
from strom.coordinator.share_group import ShareGroup, ShareHeartbeatError, ShareHeartbeatRequest
from strom.coordinator.share_groups import SHARE_MEMBER_TIMER, DescribedShareGroup, ShareGroupManager
from strom.coordinator.timers import TimerQueue
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.coordinator")

S = GroupState
EXPIRE_OFFSETS_KEY = ("expire-offsets",)


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig, topics: Callable[[], Mapping[str, TopicImage]] = dict) -> None:
        """``topics``: the topics as they are now (name -> id and partition count), which classic
        members of a consumer group need (their assignments are by name, the group's by id)."""
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        # Consumer-protocol groups (KIP-848); their offsets are kept in ``groups``.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.timers = TimerQueue()
        self.classic = ClassicGroupManager(config, self.groups, self.timers)
        self.consumer = ConsumerGroupManager(config, self.consumer_groups, self.groups, self.timers)
        self.consumer_log = ConsumerGroupLog(self.consumer_groups, self.consumer.clients)
        # Share groups (KIP-932): a type of their own, no offsets (coordinator/share_groups.py).
        self.share_groups: dict[str, ShareGroup] = {}
        self.share = ShareGroupManager(config, self.share_groups, self.timers)
        self._loading_share: set[str] = set()
        # Consumer groups changed by an operation that could not write (a classic Heartbeat that
        # dropped an empty one): the next tick writes their records.
        self._unwritten: set[str] = set()
        self.offsets = OffsetManager(config, self.groups, self.classic, self.consumer)
        self.migration = GroupMigration(config, self.groups, self.classic, self.consumer, topics,
                                        self.consumer_log.records)
        # What a ConsumerGroupHeartbeat's conversion (upgrade or downgrade) writes and answers: the
        # heartbeat itself is answered at once, so the runtime takes these after it (take_deferred).
        self.deferred = CoordinatorResult()

    # ------------------------------------------------------------------ loading

    def replay(self, key: bytes, value: bytes | None, now: int, producer_id: int = -1) -> None:
        """Apply one __consumer_offsets record (at load, and after appending an offset commit); a
        record of a transaction (``producer_id``) waits for its marker."""
        share_key = srec.decode_key(key) if key[:2] >= b"\x00\x09" else None
        if share_key is not None:
            record_type, group_id, member_id = share_key
            srec.replay(self.share_groups, record_type, group_id, member_id, value)
            self._loading_share.add(group_id)
            return
        k = rec.decode_key(key)
        if isinstance(k, rec.OffsetCommitKey):
            decoded = None if value is None else rec.decode_offset_commit_value(value)
            if producer_id >= 0:
                self.offsets.replay_pending(producer_id, k, decoded)
            else:
                self.offsets.replay(k, decoded, now)
        elif isinstance(k, rec.GroupMetadataKey):
            group = self.groups.get(k.group)
            if value is None:
                if group is not None:
                    # The group's membership is gone; offsets have their own tombstones.
                    fresh = ClassicGroup(k.group, state_timestamp=-1, offsets=group.offsets)
                    self.groups[k.group] = fresh
                    self.classic.drop_if_unused(fresh)
                return
            if group is None:
                group = self.groups[k.group] = ClassicGroup(k.group)
            self.classic.load_group(rec.decode_group_metadata_value(value), group)
        elif isinstance(k, rec.ConsumerGroupKey):
            self.consumer_log.replay(k, value)

    def loaded(self, now: int) -> None:
        """Loading is over: start the loaded members' session clocks and the retention timer."""
        for group in self.groups.values():
            for member in group.members.values():
                self.classic.reschedule_heartbeat(now, group, member)
        for consumer_group in self.consumer_log.loaded():
            self.consumer.on_loaded(now, consumer_group)
        for group_id in sorted(self._loading_share):
            self.share.on_loaded(now, group_id)
        self._loading_share.clear()
        self.timers.schedule(EXPIRE_OFFSETS_KEY, now + self.config.offsets_retention_check_interval_ms)

    # ------------------------------------------------------------------ group membership

    # A classic request for a consumer group with members is served by the consumer group, its
    # member keeping the classic protocol (Kafka 4's classicGroup*ToConsumerGroup, whatever the
    # migration policy): coordinator/migration.py.

    def join_group(self, now: int, token: Token, req: JoinGroupRequestData) -> CoordinatorResult:
        if req.group_id in self.share_groups:
            return CoordinatorResult(replies=[(token, JoinGroupResult(E.group_id_not_found, req.member_id))])
        if self.consumer.blocks_classic(req.group_id):
            return self._then_consumer_records(req.group_id, self.migration.join_group(now, token, req))
        return self._with_consumer_records(req.group_id, self.classic.join_group(now, token, req))

    def sync_group(self, now: int, token: Token, req: SyncGroupRequestData) -> CoordinatorResult:
        if self.consumer.blocks_classic(req.group_id):
            return self._then_consumer_records(req.group_id, self.migration.sync_group(now, token, req))
        return self._with_consumer_records(req.group_id, self.classic.sync_group(now, token, req))

    def heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int) -> E:
        if self.consumer.blocks_classic(group_id):
            return self.migration.heartbeat(now, group_id, member_id, instance_id, generation)
        if group_id in self.consumer_log.written:
            self._unwritten.add(group_id)  # an empty consumer group became classic
        return self.classic.heartbeat(now, group_id, member_id, instance_id, generation)

    def leave_group(self, now: int, token: Token, group_id: str, members: list[MemberIdentity]) -> CoordinatorResult:
        if self.consumer.blocks_classic(group_id):
            return self._then_consumer_records(group_id, self.migration.leave_group(now, token, group_id, members))
        return self._with_consumer_records(group_id, self.classic.leave_group(now, token, group_id, members))

    def _with_consumer_records(self, group_id: str, res: CoordinatorResult) -> CoordinatorResult:
        """Put before ``res`` the consumer group records of ``group_id`` not written yet: the
        tombstones of an empty consumer group that a classic request turned classic."""
        records = self.consumer_log.records(group_id)
        if records:
            res.records[:0] = records
        return res

    def _then_consumer_records(self, group_id: str, res: CoordinatorResult) -> CoordinatorResult:
        """Put after ``res`` (a classic request served by a consumer group) the records of what it
        changed in the group (a downgrade's are in ``res`` already, in their order)."""
        res.records.extend(self.consumer_log.records(group_id))
        return res

    def consumer_group_heartbeat(self, now: int, req: HeartbeatRequest, topics: Mapping[str, TopicImage],
                                 client: tuple[str, str] = ("", "")) -> HeartbeatResponse:
        """ConsumerGroupHeartbeat (KIP-848); raises HeartbeatError with Kafka's error. A join into a
        classic group with members may upgrade it first, a leave may downgrade the group after; what
        those write and answer waits in ``deferred`` (consumer_group_heartbeat_written takes it)."""
        if req.group_id in self.share_groups:
            raise HeartbeatError(E.group_id_not_found, f"Group {req.group_id} is not a consumer group.")
        self.deferred.merge(self.migration.maybe_upgrade(now, req, topics))
        response = self.consumer.heartbeat(now, req, topics, client)
        if req.member_epoch == LEAVE_EPOCH:
            self.deferred.merge(self.migration.after_consumer_member_left(now, req.group_id))
        return response

    def take_deferred(self) -> CoordinatorResult:
        """The records and answers of conversions made by ConsumerGroupHeartbeats since the last call."""
        out, self.deferred = self.deferred, CoordinatorResult()
        return out

    def consumer_group_heartbeat_written(self, now: int, token: Token, req: HeartbeatRequest,
                                         topics: Mapping[str, TopicImage],
                                         client: tuple[str, str] = ("", "")) -> CoordinatorResult:
        """ConsumerGroupHeartbeat as the runtime runs it: the group's records that changed, and the
        answer (a HeartbeatResponse, or the HeartbeatError) to send once they are written; if they
        cannot be, the error of the write (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        res = CoordinatorResult()
        member_id = req.member_id
        try:
            response = self.consumer_group_heartbeat(now, req, topics, client)
            member_id = response.member_id or member_id
            res.reply(token, response)
        except HeartbeatError as e:
            res.reply(token, e)  # what it changed before failing is written all the same
        # An upgrade's records (the classic group's tombstone, the new group) come before the
        # heartbeat's own; a downgrade's already hold the group's tombstones, then the classic group.
        conversion = self.take_deferred()
        res.records = conversion.records + self.consumer_group_records(req.group_id, member_id)
        conversion.records = []

        def failed(_now: int, error: int) -> CoordinatorResult:
            out = CoordinatorResult()
            out.reply(token, HeartbeatError(E(error), "the group's records could not be written"))
            return out
        res.on_failure = failed
        return res.merge(conversion)  # and the answers to the classic requests a conversion parked

    def consumer_group_records(self, group_id: str, member_id: str | None = None) -> list[Record]:
        """The records that bring __consumer_offsets up to the consumer group's state now
        (``member_id``: the one member the operation changed, if only one)."""
        return self.consumer_log.records(group_id, member_id)

    def describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup:
        if group_id in self.share_groups:
            return DescribedConsumerGroup(group_id, E.group_id_not_found, f"Group {group_id} is not a consumer group.")
        return self.consumer.describe(group_id)

    # ------------------------------------------------------------------ share groups

    def _type_of(self, group_id: str) -> str | None:
        """The type of an existing group that is not a share group (one id, one type)."""
        if group_id in self.consumer_groups:
            return "consumer"
        group = self.groups.get(group_id)
        if group is not None and not group.is_in(S.DEAD):
            return "classic"
        return None

    def share_group_heartbeat(self, now: int, token: Token, req: ShareHeartbeatRequest,
                              topics: Mapping[str, TopicImage], client: tuple[str, str]) -> CoordinatorResult:
        """ShareGroupHeartbeat: the answer (a ShareHeartbeatResponse or the ShareHeartbeatError),
        sent once the group's changed records are written."""
        res = CoordinatorResult()
        try:
            response, res.records = self.share.heartbeat(now, req, topics, client, self._type_of(req.group_id))
            res.reply(token, response)
        except ShareHeartbeatError as e:
            res.reply(token, e)
            res.records = self.share.log.records(req.group_id) if req.group_id in self.share.log.written else []

        def failed(_now: int, error: int) -> CoordinatorResult:
            return CoordinatorResult(replies=[(token, ShareHeartbeatError(E(error), "the group's records could not be written"))])
        res.on_failure = failed
        return res

    def describe_share_group(self, group_id: str) -> DescribedShareGroup:
        return self.share.describe(group_id, self._type_of(group_id))

    def share_offsets_error(self, group_id: str) -> tuple[E, str | None]:
        return self.share.offsets_error(group_id, self._type_of(group_id))

    def share_initialized(self, group_id: str) -> dict[uuid.UUID, frozenset[int]] | None:
        return self.share.initialized(group_id)

    def share_change_initialized(self, token: Token, group_id: str,
                                 add: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                                 remove: set[uuid.UUID]) -> CoordinatorResult:
        res = CoordinatorResult(records=self.share.change_initialized(group_id, add, remove))
        res.reply(token, E.none)
        res.on_failure = lambda _now, error: CoordinatorResult(replies=[(token, E(error))])
        return res

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> E:
        """OffsetFetch v9+: a consumer group's member must give its id and current epoch, if any."""
        return self.consumer.validate_fetch(group_id, member_id, member_epoch)

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, now: int, token: Token, req: OffsetCommitRequestData) -> CoordinatorResult:
        return self.offsets.commit(now, token, req)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool = False) -> list[FetchedOffset]:
        return self.offsets.fetch(group_id, partitions, require_stable)

    def txn_commit_offsets(self, now: int, token: Token, req: OffsetCommitRequestData, producer_id: int,
                           producer_epoch: int) -> CoordinatorResult:
        return self.offsets.txn_commit(now, token, req, producer_id, producer_epoch)

    def delete_offsets(self, now: int, token: Token, group_id: str,
                       partitions: list[TopicPartition]) -> CoordinatorResult:
        return self.offsets.delete_offsets(now, token, group_id, partitions)

    def delete_groups(self, now: int, token: Token, group_ids: list[str]) -> CoordinatorResult:
        answers: dict[str, E] = {}
        share_records: list[Record] = []
        for group_id in group_ids:
            if group_id in self.share_groups:
                answers[group_id], written = self.share.delete(group_id)
                share_records += written
                continue
            group = self.consumer_groups.get(group_id)
            if group is not None:
                if group.members:
                    answers[group_id] = E.non_empty_group
                    continue
                del self.consumer_groups[group_id]
                if group_id not in self.groups:
                    answers[group_id] = E.none
        records = [r for g in group_ids for r in self.consumer_log.records(g)]
        rest = [g for g in group_ids if g not in answers]
        res = self.offsets.delete_groups(now, token, rest) if rest else CoordinatorResult()
        res.records[:0] = share_records + records
        if answers:
            # Merge with the classic answers, in the request's order.
            classic = dict(res.replies.pop()[1]) if rest else {}
            res.reply(token, [(g, answers[g] if g in answers else classic[g]) for g in group_ids])
        return res

    # ------------------------------------------------------------------ describing

    def describe_group(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group_id in self.consumer_groups or group_id in self.share_groups:
            # A consumer (or share) group is not described here (Kafka 4: Dead, and GROUP_ID_NOT_FOUND "not a
            # classic group" from DescribeGroups v6): ConsumerGroupDescribe describes it.
            return DescribedGroup(group_id, E.none, S.DEAD.value, "", "",
                                  dead_reason=f"Group {group_id} is not a classic group.")
        if group is None or group.is_in(S.DEAD):
            return DescribedGroup(group_id, E.none, S.DEAD.value, "", "", dead_reason=f"Group {group_id} not found.")
        stable = group.is_in(S.STABLE)
        # Like Kafka: member metadata and assignments only once the group is Stable.
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata_for(group.protocol_name) if stable else b"",
                              m.assignment if stable else b"")
            for m in group.members.values()
        )
        protocol = (group.protocol_name or "") if stable else ""
        return DescribedGroup(group_id, E.none, group.state.value, group.protocol_type or "", protocol, members)

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None) -> list[ListedGroup]:
        wanted_states = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        out = self.consumer.list_groups(wanted_states, wanted_types)
        out += self.share.list_groups(wanted_states, wanted_types)
        for group in self.groups.values():
            if group.is_in(S.DEAD) or group.group_id in self.consumer_groups:
                continue
            if wanted_states is not None and group.state.value.lower() not in wanted_states:
                continue
            if wanted_types is not None and "classic" not in wanted_types:
                continue
            out.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
        return out

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def tick(self, now: int) -> CoordinatorResult:
        res = CoordinatorResult()
        while (key := self.timers.pop_expired(now)) is not None:
            res.merge(self._fire(now, key))
        for group_id in sorted(self._unwritten):
            res.records.extend(self.consumer_log.records(group_id))
        self._unwritten.clear()
        return res

    def _fire(self, now: int, key: object) -> CoordinatorResult:
        assert isinstance(key, tuple)
        kind = key[0]
        if kind == "expire-offsets":
            self.timers.schedule(EXPIRE_OFFSETS_KEY, now + self.config.offsets_retention_check_interval_ms)
            res = self.offsets.expire(now)
            before = set(self.consumer_groups)
            self.consumer.drop_unused()
            self._unwritten |= before - set(self.consumer_groups)  # their tombstones
            return res
        if kind == SHARE_MEMBER_TIMER:
            return CoordinatorResult(records=self.share.on_member_timer(now, key[1], key[2]))
        if kind == MEMBER_TIMER:
            expired = self.consumer.on_member_timer(now, key[1], key[2])
            res = CoordinatorResult()
            if expired is not None and not expired.uses_classic_protocol:
                res = self.migration.after_consumer_member_left(now, key[1])
            # The expiry's own records first; a downgrade's (tombstones, then the classic group) follow.
            res.records[:0] = self.consumer_log.records(key[1])
            return res
        group = self.groups.get(key[1])
        if group is None:
            return CoordinatorResult()
        if kind == "heartbeat":
            return self.classic.on_heartbeat_expired(now, group, key[2])
        if kind == "pending-member":
            return self.classic.on_pending_member_expired(now, group, key[2])
        if kind == "join":
            return self.classic.on_join_expired(now, group)
        if kind == "sync":
            return self.classic.on_sync_expired(now, group, key[2])
        raise AssertionError(f"unknown timer {key!r}")

