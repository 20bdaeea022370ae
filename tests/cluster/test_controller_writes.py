"""The controller's compare-and-set writes against a real ZooKeeper: a write refused because the
partition state changed since the controller's copy of it (the watch has not brought the change
yet) must not be taken for done."""

from __future__ import annotations

import uuid

import pytest
from clusterproc import ZooKeeperView, run_until
from kazoo.client import KazooClient

from strom.cluster import zk_layout as zl
from strom.cluster.controller import Controller, _Fenced
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


def _make_topic(client: KazooClient, name: str, partitions: int) -> None:
    client.create(zl.topic_path(name), zl.encode_topic(zl.TopicAssignment(
        name, uuid.uuid4(), {p: [1] for p in range(partitions)}, {}, {})), makepath=True)
    client.create(zl.topic_config_path(name), zl.encode_config({}), makepath=True)
    client.ensure_path(zl.partitions_path(name))
    txn = client.transaction()
    for p in range(partitions):
        txn.create(zl.partition_path(name, p), b"")
        txn.create(zl.state_path(name, p), zl.encode_state(PartitionState(1, 0, (1,), 1)))
    assert not any(isinstance(r, Exception) for r in txn.commit())
    client.create(zl.delete_topic_path(name), b"", makepath=True)


def _controller(zk_view: ZooKeeperView) -> Controller:
    """A controller at epoch 1 whose own background passes never run: only the calls made."""
    other = zk_view.other
    other.create(zl.CONTROLLER_EPOCH, b"1")
    controller = Controller(zk_view.store, 1, lambda topic: False, spawn=lambda coro: coro.close())  # type: ignore[arg-type,return-value]
    controller.epoch, controller._epoch_version = 1, other.exists(zl.CONTROLLER_EPOCH).version
    return controller


def test_topics_are_deleted_together_in_a_few_transactions(zk_view: ZooKeeperView,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Three topics in one pass: every znode of each (partitions, states, config, request) goes,
    in far fewer transactions than znodes; a topic of another name stays."""
    other = zk_view.other
    for name, partitions in (("a", 700), ("b", 5), ("c", 1)):
        _make_topic(other, name, partitions)
    _make_topic(other, "kept", 3)
    other.delete(zl.delete_topic_path("kept"))
    controller = _controller(zk_view)
    with caplog.at_level("INFO", logger="strom.controller"):
        zk_view.loop.run_until_complete(zk_view.store.run(controller._delete_topics, ["a", "b", "c"]))
    for name in ("a", "b", "c"):
        for path in (zl.topic_path(name), zl.topic_config_path(name), zl.delete_topic_path(name)):
            assert other.exists(path) is None, path
    assert sorted(other.get_children(zl.partitions_path("kept"))) == ["0", "1", "2"]
    assert other.exists(zl.topic_config_path("kept")) is not None
    (said,) = [r.getMessage() for r in caplog.records if "znodes in" in r.getMessage()]
    # Each topic: a partition node and a state per partition, the partitions node, the topic node,
    # its config and the request.
    assert said.startswith("deleted 3 topics: 1424 znodes in 2 transactions"), said


def test_a_topic_tree_not_as_kafka_lays_it_out_is_deleted_all_the_same(zk_view: ZooKeeperView,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A partition node left without its state (a creation cut short) and a node strom never
    writes: the first guess of the tree fails, and the tree read in full is deleted."""
    other = zk_view.other
    _make_topic(other, "odd", 40)
    other.delete(zl.state_path("odd", 7))
    other.create(zl.state_path("odd", 12) + "/extra", b"")
    controller = _controller(zk_view)
    with caplog.at_level("INFO", logger="strom.controller"):
        zk_view.loop.run_until_complete(zk_view.store.run(controller._delete_topics, ["odd"]))
    assert any("reading it in full" in r.getMessage() for r in caplog.records)
    for path in (zl.topic_path("odd"), zl.topic_config_path("odd"), zl.delete_topic_path("odd")):
        assert other.exists(path) is None, path


def test_a_deposed_controller_deletes_nothing(zk_view: ZooKeeperView) -> None:
    other = zk_view.other
    _make_topic(other, "t", 10)
    controller = _controller(zk_view)
    other.set(zl.CONTROLLER_EPOCH, b"2")  # another controller took over
    with pytest.raises(_Fenced):
        zk_view.loop.run_until_complete(zk_view.store.run(controller._delete_topics, ["t"]))
    assert sorted(other.get_children(zl.partitions_path("t")), key=int) == [str(p) for p in range(10)]
    assert other.exists(zl.delete_topic_path("t")) is not None
