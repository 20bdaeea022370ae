"""Partition and ReplicaManager (replication): which followers a leader may add back to the ISR."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.cluster.zk_layout import PartitionState
from strom.replication.partition import Partition
from strom.replication.purgatory import Purgatory
from strom.replication.replica_manager import ReplicaManager


def _leader_with_caught_up_followers() -> Partition:
    log: Any = SimpleNamespace(log_end_offset=100, high_watermark=90, replicated=False,
                               leader_epoch_cache=SimpleNamespace(entries=[SimpleNamespace(epoch=3, start_offset=50)]))
    log.update_high_watermark = lambda offset: setattr(log, "high_watermark", offset)
    part = Partition("t", 0, log, [1, 2, 3], PartitionState(1, 3, (1,), 1), broker_id=1)
    part.become_leader(PartitionState(1, 3, (1,), 1), now_ms=0)
    part.update_follower(2, 100, now_ms=10)
    part.update_follower(3, 95, now_ms=10)
    return part


def test_caught_up_followers_may_rejoin() -> None:
    part = _leader_with_caught_up_followers()
    assert part.can_join_isr(2) and part.can_join_isr(3)
    assert not part.can_join_isr(1)  # the leader is in the ISR already
    assert not part.can_join_isr(4)  # not a replica, never fetched


def test_a_follower_behind_the_high_watermark_or_the_epoch_start_stays_out() -> None:
    part = _leader_with_caught_up_followers()
    part.update_follower(3, 80, now_ms=20)  # below the high watermark (90)
    assert not part.can_join_isr(3) and part.can_join_isr(2)
    part.log.high_watermark = 40
    part.update_follower(2, 45, now_ms=20)  # past the high watermark, before this epoch's start (50)
    assert not part.can_join_isr(2)


def _manager(brokers: set[int], shutting_down: set[int]) -> tuple[ReplicaManager, list[tuple[int, ...]]]:
    """A ReplicaManager whose ISR writes are recorded instead of sent to ZooKeeper."""
    proposed: list[tuple[int, ...]] = []
    store: Any = SimpleNamespace(listeners=[], brokers={b: None for b in brokers}, shutting_down=shutting_down)
    manager = ReplicaManager(
        1, store, logs=Any, purgatory=Purgatory(), config=lambda: Any, spawn=Any, inter_broker_security=Any,
        topic_log_config=Any, on_topic_config=Any, on_client_append=Any)

    def change_isr(part: Partition, isr: tuple[int, ...], why: str) -> None:
        proposed.append(isr)

    manager._change_isr = change_isr  # type: ignore[method-assign]
    return manager, proposed


def test_only_a_fetch_from_an_eligible_broker_expands_the_isr() -> None:
    """Kafka's rules: only a follower's fetch brings it back, and only a live broker not in a
    controlled shutdown (the controller has just taken that one out)."""
    manager, proposed = _manager(brokers={1, 2, 3}, shutting_down={3})
    part = _leader_with_caught_up_followers()
    manager.follower_fetched(part, 3, 100)
    assert proposed == []  # shutting down
    manager.follower_fetched(part, 2, 100)
    assert proposed == [(1, 2)]
    manager, proposed = _manager(brokers={1, 3}, shutting_down=set())
    manager.follower_fetched(part, 2, 100)
    assert proposed == []  # not a registered broker (its registration vanished)
