"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention (Kafka's OffsetMetadataManager).

A commit is validated against the group, turned into OffsetCommit records, and takes effect when
the runtime replays those records after appending them, so what OffsetFetch returns is always
what the log holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from strom.coordinator import records as rec
from strom.coordinator.api import (
    FetchedOffset,
    OffsetCommitRequestData,
    PartitionError,
)
from strom.coordinator.classic import ClassicGroupManager, group_tombstone, validate_current_member
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_protocol import PROTOCOL_TYPE
from strom.coordinator.group import ClassicGroup, GroupState, OffsetAndMetadata, Token, TopicPartition
from strom.coordinator.result import CoordinatorResult, Record
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.coordinator.consumer_groups import ConsumerGroupManager

log = logging.getLogger("strom.coordinator")

S = GroupState


def offset_record(group_id: str, topic: str, partition: int, value: rec.OffsetCommitValue | None,
                  replay: bool = False) -> Record:
    key = rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, topic, partition))
    return Record(group_id, key, None if value is None else rec.encode_offset_commit_value(value), replay)


class OffsetManager:
    def __init__(self, config: GroupConfig, groups: dict[str, ClassicGroup], classic: ClassicGroupManager,
                 consumer: ConsumerGroupManager | None = None) -> None:
        self.config = config
        self.groups = groups  # classic groups, and the offsets of consumer groups
        self.classic = classic
        self.consumer = consumer
        # Transactional offset commits not decided yet (Kafka's pendingTransactionalOffsetCommits):
        # producer id -> group -> partition -> offset. A COMMIT marker moves them into the groups.
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    # ------------------------------------------------------------------ OffsetCommit

    def commit(self, now: int, token: Token, req: OffsetCommitRequestData) -> CoordinatorResult:
        res = CoordinatorResult()

        def all_failed(error: E) -> list[PartitionError]:
            return [PartitionError(p.topic, p.partition, error) for p in req.partitions]

        consumer_error = self._validate_consumer(req)
        if consumer_error is not None and consumer_error is not E.none:
            res.reply(token, all_failed(consumer_error))
            return res
        group = self.groups.get(req.group_id)
        if consumer_error is E.none:
            # A consumer group: its member is validated; the offsets are kept under its id.
            if group is None:
                group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp=now)
        elif group is None:
            if req.generation_id >= 0:
                # A member of a generation this coordinator does not know: reject.
                res.reply(token, all_failed(E.illegal_generation))
                return res
            # Not using group management ("simple" consumer, admin tools): the group is just a namespace.
            group = ClassicGroup(req.group_id, state_timestamp=now)
            self.groups[req.group_id] = group
        error = None if consumer_error is E.none else validate_offset_commit(
            group, req.member_id, req.group_instance_id, req.generation_id)
        if error is not None:
            res.reply(token, all_failed(error))
            self.classic.drop_if_unused(group)
            return res
        member = group.members.get(req.member_id)
        if member is not None and group.is_in(S.STABLE, S.PREPARING_REBALANCE):
            # A commit is as good as a heartbeat; during PreparingRebalance it is still accepted,
            # the next heartbeat tells the member to rejoin.
            self.classic.reschedule_heartbeat(now, group, member)
        results: list[PartitionError] = []
        for p in req.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionError(p.topic, p.partition, E.offset_metadata_too_large))
                continue
            value = rec.OffsetCommitValue(p.offset, p.leader_epoch, metadata, now)
            res.records.append(offset_record(req.group_id, p.topic, p.partition, value, replay=True))
            results.append(PartitionError(p.topic, p.partition, E.none))
        res.reply(token, results)
        res.on_failure = _failed_writes(token, results)
        if not res.records:
            self.classic.drop_if_unused(group)
        return res

    # ------------------------------------------------------------------ TxnOffsetCommit

    def txn_commit(self, now: int, token: Token, req: OffsetCommitRequestData, producer_id: int,
                   producer_epoch: int) -> CoordinatorResult:
        """Offsets written in the producer's transaction; the group sees them when it commits."""
        res = CoordinatorResult()
        consumer_error = self._validate_consumer(req) if req.generation_id >= 0 else None
        if consumer_error is not None and consumer_error is not E.none:
            res.reply(token, [PartitionError(p.topic, p.partition, consumer_error) for p in req.partitions])
            return res
        group = self.groups.get(req.group_id)
        if consumer_error is None and group is not None and group.members and req.generation_id >= 0:
            error = validate_offset_commit(group, req.member_id, req.group_instance_id, req.generation_id)
            if error is not None:
                res.reply(token, [PartitionError(p.topic, p.partition, error) for p in req.partitions])
                return res
        results: list[PartitionError] = []
        for p in req.partitions:
            if len((p.metadata or "").encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionError(p.topic, p.partition, E.offset_metadata_too_large))
                continue
            value = rec.OffsetCommitValue(p.offset, p.leader_epoch, p.metadata or "", now)
            record = offset_record(req.group_id, p.topic, p.partition, value, replay=True)
            res.records.append(Record(record.group_id, record.key, record.value, True, producer_id, producer_epoch))
            results.append(PartitionError(p.topic, p.partition, E.none))
        res.reply(token, results)
        res.on_failure = _failed_writes(token, results)
        return res

    def _validate_consumer(self, req: OffsetCommitRequestData) -> E | None:
        """A commit to a consumer-protocol group: NONE or its error; None when the group is not one."""
        if self.consumer is None:
            return None
        return self.consumer.validate_commit(req.group_id, req.member_id, req.generation_id, req.api_version)

    def replay_pending(self, producer_id: int, key: rec.OffsetCommitKey, value: rec.OffsetCommitValue | None) -> None:
        if value is None:
            return
        by_group = self.pending_txn.setdefault(producer_id, {})
        by_group.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)

    def complete_txn(self, producer_id: int, commit: bool, in_partition: Callable[[str], bool]) -> None:
        """The transaction's marker reached the partition holding these groups: apply or drop."""
        by_group = self.pending_txn.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if in_partition(g)]:
            offsets = by_group.pop(group_id)
            if not commit:
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp=-1)
            group.offsets.update(offsets)
        if not by_group:
            del self.pending_txn[producer_id]

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, {}) for by_group in self.pending_txn.values())

    def replay(self, key: rec.OffsetCommitKey, value: rec.OffsetCommitValue | None, now: int) -> None:
        tp = (key.topic, key.partition)
        group = self.groups.get(key.group)
        if value is None:
            if group is not None:
                group.offsets.pop(tp, None)
                self.classic.drop_if_unused(group)
            return
        if group is None:
            group = ClassicGroup(key.group, state_timestamp=-1)
            self.groups[key.group] = group
        group.offsets[tp] = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,
                                              value.commit_timestamp, value.expire_timestamp)

    # ------------------------------------------------------------------ OffsetFetch

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None,
              require_stable: bool = False) -> list[FetchedOffset]:
        """Committed offsets (-1 where none); ``partitions`` None means all the group has. With
        ``require_stable`` a partition with a transactional commit not yet decided answers
        UNSTABLE_OFFSET_COMMIT (the client asks again)."""
        group = self.groups.get(group_id)
        offsets = {} if group is None or group.is_in(S.DEAD) else group.offsets
        wanted = sorted(offsets) if partitions is None else partitions
        out = []
        for topic, partition in wanted:
            o = offsets.get((topic, partition))
            if require_stable and self.pending_txn and self.has_pending(group_id, (topic, partition)):
                out.append(FetchedOffset(topic, partition, error=E.unstable_offset_commit))
            elif o is None:
                out.append(FetchedOffset(topic, partition))
            else:
                out.append(FetchedOffset(topic, partition, o.offset, o.leader_epoch, o.metadata))
        return out

    # ------------------------------------------------------------------ OffsetDelete / DeleteGroups

    def delete_offsets(self, now: int, token: Token, group_id: str,
                       partitions: list[TopicPartition]) -> CoordinatorResult:
        """OffsetDelete: answers (group error, per-partition errors)."""
        res = CoordinatorResult()
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            res.reply(token, (E.group_id_not_found, []))
            return res
        eligible: list[TopicPartition] = []
        errors: list[PartitionError] = []
        if group.is_in(S.EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == PROTOCOL_TYPE:
            for topic, partition in partitions:
                if group.is_subscribed_to_topic(topic):
                    errors.append(PartitionError(topic, partition, E.group_subscribed_to_topic))
                else:
                    eligible.append((topic, partition))
        else:
            res.reply(token, (E.non_empty_group, []))
            return res
        if eligible:
            res.merge(self.cleanup_group(now, group, [tp for tp in eligible if tp in group.offsets]))
            errors.extend(PartitionError(t, p, E.none) for t, p in eligible)
        res.reply(token, (E.none, errors))
        return res

    def delete_groups(self, now: int, token: Token, group_ids: list[str]) -> CoordinatorResult:
        """DeleteGroups: only Empty groups go; answers [(group id, error)]."""
        res = CoordinatorResult()
        answers: list[tuple[str, E]] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_in(S.DEAD):
                answers.append((group_id, E.group_id_not_found))
            elif not group.is_in(S.EMPTY):
                answers.append((group_id, E.non_empty_group))
            else:
                for member_id in list(group.pending_members):
                    self.classic.remove_pending_member(now, group, member_id, CoordinatorResult())
                group.transition_to(S.DEAD, now)
                res.merge(self.cleanup_group(now, group, list(group.offsets)))
                answers.append((group_id, E.none))
                log.info("deleted group %s", group_id)
        res.reply(token, answers)
        return res

    def cleanup_group(self, now: int, group: ClassicGroup, remove: Iterable[TopicPartition]) -> CoordinatorResult:
        """Remove the selected offsets (tombstones); an Empty group left without offsets dies."""
        res = CoordinatorResult()
        for topic, partition in list(remove):
            group.offsets.pop((topic, partition), None)
            res.records.append(offset_record(group.group_id, topic, partition, None))
        if group.is_in(S.EMPTY) and not group.offsets and not group.pending_members:
            group.transition_to(S.DEAD, now)
        if group.is_in(S.DEAD):
            self.groups.pop(group.group_id, None)
            self.classic.join_ops.pop(group.group_id, None)
            if group.generation_id > 0:
                res.records.append(group_tombstone(group.group_id))
        return res

    # ------------------------------------------------------------------ retention

    def expire(self, now: int) -> CoordinatorResult:
        """Kafka's cleanupGroupMetadata: expire offsets past offsets.retention.minutes."""
        res = CoordinatorResult()
        expired_total = 0
        for group in list(self.groups.values()):
            if self.consumer is not None and self.consumer.is_active(group.group_id):
                continue  # a consumer group with members keeps its offsets
            expired = self._expired_offsets(now, group)
            expired_total += len(expired)
            if expired or group.is_in(S.EMPTY):
                res.merge(self.cleanup_group(now, group, expired))
        if expired_total:
            log.info("removed %d expired offsets", expired_total)
        return res

    def _expired_offsets(self, now: int, group: ClassicGroup) -> list[TopicPartition]:
        retention = self.config.offsets_retention_ms
        if group.protocol_type is not None and group.is_in(S.EMPTY):
            # Nobody is consuming: count from the moment the group became empty.
            state_ts = group.state_timestamp
            return [tp for tp, o in group.offsets.items()
                    if _is_expired(now, o, state_ts if state_ts >= 0 else o.commit_timestamp, retention)]
        if group.protocol_type == PROTOCOL_TYPE and group.subscribed_topics is not None and group.is_in(S.STABLE):
            # Active consumers: only offsets of topics nobody subscribes to any more can expire.
            return [tp for tp, o in group.offsets.items()
                    if tp[0] not in group.subscribed_topics and _is_expired(now, o, o.commit_timestamp, retention)]
        if group.protocol_type is None:
            # A group used only for offset storage: each offset expires on its own.
            return [tp for tp, o in group.offsets.items() if _is_expired(now, o, o.commit_timestamp, retention)]
        return []


def _failed_writes(token: Token, results: list[PartitionError]) -> Callable[[int, int], CoordinatorResult]:
    """A commit whose records could not be written: the partitions that were to be written get the
    write's error, the others keep theirs."""
    def failed(now_ms: int, error_code: int) -> CoordinatorResult:
        out = CoordinatorResult()
        out.reply(token, [r if r.error is not E.none else PartitionError(r.topic, r.partition, E(error_code))
                          for r in results])
        return out

    return failed


def _is_expired(now: int, o: OffsetAndMetadata, base_ts: int, retention_ms: int) -> bool:
    if o.expire_timestamp >= 0:  # written by an old client with an explicit retention time
        return now >= o.expire_timestamp
    return now - base_ts >= retention_ms


def validate_offset_commit(group: ClassicGroup, member_id: str, instance_id: str | None, generation: int) -> E | None:
    if group.is_in(S.DEAD):
        return E.coordinator_not_available
    if generation < 0 and group.is_in(S.EMPTY):
        return None  # admin client or a consumer without group management
    if generation >= 0 or member_id or instance_id is not None:
        error = validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation_id:
            return E.illegal_generation
    else:
        return E.unknown_member_id  # the group has members: only they may commit
    if group.is_in(S.COMPLETING_REBALANCE):
        # The member is current but has no assignment yet: let it retry after SyncGroup.
        return E.rebalance_in_progress
    return None
