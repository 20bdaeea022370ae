"""Partition.isr_to_expand: who may (re)join the ISR, on the leader's side (pure, no broker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.cluster.zk_layout import PartitionState
from strom.replication.partition import FollowerState, Partition
from strom.storage.leader_epoch import EpochEntry


def _leader(isr: tuple[int, ...], follower_ends: dict[int, int]) -> Partition:
    # Leader 1 at epoch 3, which started at offset 50; log end 100, high watermark 90.
    log: Any = SimpleNamespace(log_end_offset=100, high_watermark=90,
                               leader_epoch_cache=SimpleNamespace(entries=[EpochEntry(3, 50)]))
    part = Partition("t", 0, log, [1, 2, 3], PartitionState(1, 3, isr, 1), broker_id=1)
    part.followers = {b: FollowerState(log_end_offset=end) for b, end in follower_ends.items()}
    return part


def test_a_caught_up_follower_rejoins_the_isr() -> None:
    part = _leader((1, 2), {2: 100, 3: 95})
    assert part.isr_to_expand() == [3]
    assert _leader((1, 2), {2: 100, 3: 80}).isr_to_expand() == []  # below the high watermark


def test_a_follower_in_a_controlled_shutdown_does_not_rejoin() -> None:
    # KIP-841: the controller took broker 3 out of the ISR because it is stopping; it still fetches
    # until it does, and must not be put back.
    part = _leader((1, 2), {2: 100, 3: 100})
    assert part.isr_to_expand(ineligible={3}) == []
    assert part.isr_to_expand(ineligible={4}) == [3]
