"""A broker's ZooKeeper view (ZkMetadataStore) against a real ZooKeeper: partition state reads that
reach the event loop before their topic's assignment are not lost.

Two topics created a moment apart (a test topic, then __consumer_offsets) once left the second one
without leaders for good: the first topic's state reads had posted a batch to the loop, the second
topic's reads joined that batch, and it ran before the second topic's assignment was in the cache,
so its states were dropped. Nothing read them again (a missing state's watch fires only when the
node is made), and the controller waited on them forever."""

from __future__ import annotations

import time
import uuid

import pytest
from clusterproc import ZooKeeperView, run_until

from strom.cluster import zk_layout as zl
from strom.cluster.zk_layout import PartitionState

pytestmark = pytest.mark.timeout(60)


def _queued(view: ZooKeeperView, topic: str, count: int) -> bool:
    store = view.store
    with store._lock:
        return sum(1 for key, _, _ in store._state_queue if key[0] == topic) >= count


def test_state_reads_that_arrive_before_their_topic_are_applied(zk_view: ZooKeeperView) -> None:
    loop, store, other = zk_view.loop, zk_view.store, zk_view.other
    # A batch of state reads is already on its way to the loop (another topic's), not yet run.
    with store._lock:
        store._state_flush_posted = True
    loop.call_soon_threadsafe(store._flush_states)
    # Topic b: partition 0 without a state yet (the controller has not made it), partition 1 with one.
    other.ensure_path(zl.topic_path("b").rsplit("/", 1)[0])
    made = other.transaction()  # the topic and the one state at once, as the controller makes them
    made.create(zl.topic_path("b"), zl.encode_topic(zl.TopicAssignment(
        "b", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, {}, {})))
    state_path = zl.state_path("b", 1)
    parent = zl.topic_path("b")
    for part in state_path[len(parent) + 1:].split("/")[:-1]:
        parent = f"{parent}/{part}"
        made.create(parent)
    made.create(state_path, zl.encode_state(PartitionState(2, 3, (2, 1), 4)))
    assert all(r is True or isinstance(r, str) for r in made.commit())
    # Its reads join the pending batch (kazoo's thread; the loop does not run meanwhile), queued
    # behind the topic's own update.
    deadline = time.monotonic() + 20
    while not _queued(zk_view, "b", 2):
        assert time.monotonic() < deadline, "the state reads of b never reached the queue"
        time.sleep(0.02)

    run_until(loop, lambda: store.state_known("b", 0) and store.state_known("b", 1))
    assert store.state("b", 0) is None
    state = store.state("b", 1)
    assert state is not None and (state.leader, state.leader_epoch, state.isr) == (2, 3, (2, 1))

    # And a state made afterwards still arrives through the watch kept on the missing node.
    other.create(zl.state_path("b", 0), zl.encode_state(PartitionState(1, 1, (1, 2), 2)), makepath=True)
    run_until(loop, lambda: store.state("b", 0) is not None)
    made = store.state("b", 0)
    assert made is not None and made.leader == 1
