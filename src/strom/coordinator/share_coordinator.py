"""ShareCoordinatorShard: the share coordinator (KIP-932) as a pure state machine over
__share_group_state (Kafka's ShareCoordinatorShard): the durable state of each share partition.

A share partition's leader reads the state once when it starts serving the share partition, and
writes it whenever records are acknowledged or released; it is answered once the record is
written. A write is a ShareUpdate (merged over the last snapshot), and every
``share.coordinator.snapshot.update.records.per.snapshot`` updates the whole state is written again
as a ShareSnapshot, so replay stays short and compaction keeps one record per key and type. A write
from an older leader epoch than the state's is refused (FENCED_LEADER_EPOCH).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from strom.coordinator import share_state_records as ssr
from strom.coordinator.share_state_records import PersistedBatch, SharePartitionKey, ShareStateValue
from strom.protocol.errors import ErrorCode as E


@dataclass(frozen=True, slots=True)
class ShareState:
    """What the coordinator holds of one share partition: its last snapshot with the updates since."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...]
    create_timestamp: int = -1
    write_timestamp: int = -1
    updates: int = 0  # ShareUpdates written since the snapshot


@dataclass(frozen=True, slots=True)
class StateWrite:
    """A record to append for ``key``; the state it leads to takes effect once it is written."""

    key: bytes
    value: bytes
    share_key: SharePartitionKey
    state: ShareState


class ShareCoordinatorShard:
    def __init__(self, updates_per_snapshot: int = 500) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[SharePartitionKey, ShareState] = {}

    def replay(self, record_type: int, key: SharePartitionKey, value: ShareStateValue | None) -> None:
        if value is None:
            if record_type == ssr.SHARE_SNAPSHOT:
                self.states.pop(key, None)
            return
        old = self.states.get(key)
        if value.snapshot or old is None:
            self.states[key] = ShareState(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                          value.start_offset, value.batches, value.create_timestamp,
                                          value.write_timestamp)
        else:
            self.states[key] = _updated(old, value.leader_epoch, value.start_offset, value.batches)

    def read(self, key: SharePartitionKey) -> ShareState | None:
        return self.states.get(key)

    def write(self, key: SharePartitionKey, leader_epoch: int, start_offset: int,
              batches: Sequence[PersistedBatch], now: int, state_epoch: int = -1) -> StateWrite | E:
        """The record that persists a share partition leader's state (Kafka's WriteShareGroupState);
        ``batches`` override the offsets they cover. A ``state_epoch`` of -1 is not checked."""
        old = self.states.get(key)
        if old is not None and leader_epoch < old.leader_epoch:
            return E.fenced_leader_epoch
        if old is not None and state_epoch != -1 and state_epoch < old.state_epoch:
            return E.fenced_state_epoch
        if old is None or old.updates >= self.updates_per_snapshot:
            epoch = 0 if old is None else old.snapshot_epoch + 1
            base = old if old is not None else ShareState(0, 0, leader_epoch, start_offset, (), now, now)
            merged = _updated(base, leader_epoch, start_offset, batches)
            state = replace(merged, snapshot_epoch=epoch, updates=0, write_timestamp=now,
                            create_timestamp=base.create_timestamp if old is not None else now)
            value = ShareStateValue(True, epoch, state.leader_epoch, state.start_offset, state.batches,
                                    state.state_epoch, state.create_timestamp, now)
            return StateWrite(ssr.encode_key(ssr.SHARE_SNAPSHOT, key), ssr.encode_value(value), key, state)
        state = replace(_updated(old, leader_epoch, start_offset, batches), updates=old.updates + 1)
        value = ShareStateValue(False, old.snapshot_epoch, leader_epoch, start_offset, tuple(batches))
        return StateWrite(ssr.encode_key(ssr.SHARE_UPDATE, key), ssr.encode_value(value), key, state)

    def written(self, write: StateWrite) -> None:
        self.states[write.share_key] = write.state

    def summary(self, key: SharePartitionKey) -> ShareState | None:
        return self.states.get(key)

    def drop(self, keep: object) -> None:
        """Forget the share partitions for which ``keep(key)`` is false (a partition unloaded)."""
        assert callable(keep)
        self.states = {k: v for k, v in self.states.items() if keep(k)}


def _updated(old: ShareState, leader_epoch: int, start_offset: int,
             batches: Sequence[PersistedBatch]) -> ShareState:
    start = max(start_offset, old.start_offset) if start_offset >= 0 else old.start_offset
    return replace(old, leader_epoch=max(leader_epoch, old.leader_epoch), start_offset=start,
                   batches=ssr.merge_batches(old.batches, batches, start))


def delivery_complete_count(state: ShareState) -> int:
    """Records at or after the start offset already ACKNOWLEDGED or ARCHIVED (Kafka's
    deliveryCompleteCount, what the lag leaves out)."""
    return sum(b.last_offset - max(b.first_offset, state.start_offset) + 1 for b in state.batches
               if b.delivery_state in (ssr.ACKNOWLEDGED, ssr.ARCHIVED) and b.last_offset >= state.start_offset)


def initialized_state(old: ShareState | None, start_offset: int, state_epoch: int, now: int) -> ShareState:
    """A share partition's state started afresh at ``start_offset`` with nothing in flight (Kafka's
    InitializeShareGroupState, as AlterShareGroupOffsets asks it): a new snapshot whose leader
    epoch -1 lets whichever leader serves it next write on."""
    epoch = 0 if old is None else old.snapshot_epoch + 1
    return ShareState(epoch, state_epoch, -1, start_offset, (), now, now)


def initialize_write(shard: ShareCoordinatorShard, key: SharePartitionKey, start_offset: int, state_epoch: int,
                     now: int) -> StateWrite:
    state = initialized_state(shard.read(key), start_offset, state_epoch, now)
    value = ShareStateValue(True, state.snapshot_epoch, state.leader_epoch, state.start_offset, (),
                            state.state_epoch, now, now)
    return StateWrite(ssr.encode_key(ssr.SHARE_SNAPSHOT, key), ssr.encode_value(value), key, state)


def delete_keys(key: SharePartitionKey) -> list[bytes]:
    """The keys whose tombstones delete a share partition's state (Kafka's DeleteShareGroupState):
    its snapshot and its updates."""
    return [ssr.encode_key(ssr.SHARE_UPDATE, key), ssr.encode_key(ssr.SHARE_SNAPSHOT, key)]
