"""Partition (replication): which followers a leader may add back to the ISR."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.cluster.zk_layout import PartitionState
from strom.replication.partition import Partition


def _leader_with_caught_up_followers() -> Partition:
    log: Any = SimpleNamespace(log_end_offset=100, high_watermark=90, replicated=False,
                               leader_epoch_cache=SimpleNamespace(entries=[SimpleNamespace(epoch=3, start_offset=50)]))
    part = Partition("t", 0, log, [1, 2, 3], PartitionState(1, 3, (1,), 1), broker_id=1)
    part.become_leader(PartitionState(1, 3, (1,), 1), now_ms=0)
    part.update_follower(2, 100, now_ms=10)
    part.update_follower(3, 95, now_ms=10)
    return part


def test_caught_up_followers_rejoin() -> None:
    assert sorted(_leader_with_caught_up_followers().isr_to_expand()) == [2, 3]


def test_only_eligible_brokers_rejoin() -> None:
    """A follower that is not a live broker, or is in a controlled shutdown, stays out even when
    caught up: the controller has just taken it out of the ISR."""
    part = _leader_with_caught_up_followers()
    assert part.isr_to_expand(eligible={1, 2}) == [2]
    assert part.isr_to_expand(eligible={1}) == []


def test_a_follower_behind_the_high_watermark_or_the_epoch_start_stays_out() -> None:
    part = _leader_with_caught_up_followers()
    part.update_follower(3, 80, now_ms=20)  # below the high watermark (90)
    assert part.isr_to_expand() == [2]
    part.log.high_watermark = 40
    part.update_follower(2, 45, now_ms=20)  # past the high watermark, before this epoch's start (50)
    assert part.isr_to_expand() == [3]
