"""The controller's compare-and-set writes against a real ZooKeeper: a write refused because the
partition state changed since the controller's copy of it (the watch has not brought the change
yet) must not be taken for done."""

from __future__ import annotations

import uuid

import pytest
from clusterproc import ZooKeeperView, run_until
from kazoo.client import KazooClient

from strom.cluster import zk_layout as zl
from strom.cluster.controller import Controller
from strom.cluster.zk_layout import PartitionState

pytestmark = pytest.mark.timeout(90)


def _zk_state(client: KazooClient) -> PartitionState:
    data, stat = client.get(zl.state_path("t", 0))
    return zl.decode_state(data, stat.version)


def test_a_reassignment_is_not_finished_by_a_refused_leader_move(zk_view: ZooKeeperView) -> None:
    """t-0 moves from [1, 2] to [2, 3]: with every target replica in sync the controller moves the
    leadership off broker 1 and then writes the final replicas. If the ISR changed meanwhile (the
    leader dropped broker 3), the leader move is refused, and the reassignment must stay open: done
    anyway, broker 1 would go on leading a partition it is no longer a replica of."""
    loop, store, other = zk_view.loop, zk_view.store, zk_view.other
    other.create(zl.topic_path("t"), zl.encode_topic(zl.TopicAssignment(
        "t", uuid.uuid4(), {0: [1, 2, 3]}, {0: [3]}, {0: [1]})), makepath=True)
    other.create(zl.state_path("t", 0), zl.encode_state(PartitionState(1, 5, (1, 2, 3), 1)), makepath=True)
    other.create(zl.CONTROLLER_EPOCH, b"1")
    run_until(loop, lambda: store.state("t", 0) is not None)
    # A controller at epoch 1 whose own background elections never run: only the calls below.
    controller = Controller(store, 1, lambda topic: False, spawn=lambda coro: coro.close())  # type: ignore[arg-type,return-value]
    controller.epoch, controller._epoch_version = 1, other.exists(zl.CONTROLLER_EPOCH).version
    stale = store.state("t", 0)

    # The leader shrinks its ISR; the controller decides on the copy it had before.
    other.set(zl.state_path("t", 0), zl.encode_state(PartitionState(1, 5, (1, 2), 1)))
    store.state = lambda topic, partition: stale  # type: ignore[method-assign]
    loop.run_until_complete(controller._complete_reassignments("t", {1, 2, 3}))
    del store.state  # the real one again
    assignment = zl.decode_topic("t", other.get(zl.topic_path("t"))[0])
    assert assignment.replicas[0] == [1, 2, 3] and assignment.removing == {0: [1]}, assignment
    assert _zk_state(other).isr == (1, 2)

    # On the current state: broker 3 is out of the ISR, so nothing moves yet ...
    run_until(loop, lambda: store.state("t", 0).isr == (1, 2))
    loop.run_until_complete(controller._complete_reassignments("t", {1, 2, 3}))
    assert zl.decode_topic("t", other.get(zl.topic_path("t"))[0]).removing == {0: [1]}
    # ... and once it is back in, the leadership moves and the reassignment is done.
    other.set(zl.state_path("t", 0), zl.encode_state(PartitionState(1, 5, (1, 2, 3), 1)))
    run_until(loop, lambda: store.state("t", 0).isr == (1, 2, 3))
    loop.run_until_complete(controller._complete_reassignments("t", {1, 2, 3}))
    assignment = zl.decode_topic("t", other.get(zl.topic_path("t"))[0])
    state = _zk_state(other)
    assert assignment.replicas[0] == [2, 3] and not assignment.adding and not assignment.removing
    assert (state.leader, state.leader_epoch, state.isr) == (2, 6, (2, 3))
