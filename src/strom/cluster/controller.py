"""The controller: one broker, elected through the ephemeral /controller znode, keeps every
partition's leader and ISR right as brokers come and go (Kafka's KafkaController, ZooKeeper mode).

It is level-triggered: any change (a broker registered or gone, a topic or partitions added, a
deletion requested) schedules one pass over the whole cluster that
- creates the state of new partitions (leader: the first live replica in assignment order),
- elects a new leader, from the ISR only unless unclean election is allowed, for a partition whose
  leader is gone or restarted (its registration has a new czxid), bumping the leader epoch,
- takes dead brokers out of ISRs, and hands an offline partition back to the first ISR member
  that returns,
- deletes the topics in /admin/delete_topics, all those requested in one pass together, their
  znodes removed in batched transactions.
Every write is a ZooKeeper transaction that checks /controller_epoch's version with a compare-and-set
on the state's version, so a deposed controller cannot write anything. A pass decides every
partition's new state first and then writes them in batches, up to _STATE_BATCH partitions per
transaction (Kafka's controller does the same with its multi-op ZooKeeper writes): a broker's
controlled shutdown moves its thousand leaderships in a few transactions, and the brokers read the
new states together (zk_store reads watched states in a pipeline and applies them in one go).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from strom.cluster import zk_layout as zl
from strom.cluster.metadata import ClusterEvent
from strom.cluster.zk_layout import PartitionState
from strom.cluster.zk_store import ZkMetadataStore
from strom.protocol.errors import ErrorCode as E

log = logging.getLogger("strom.controller")


class Controller:
    def __init__(self, store: ZkMetadataStore, broker_id: int, unclean_allowed: Callable[[str], bool],
                 spawn: Callable[[Any], asyncio.Task[Any]]) -> None:
        self.store = store
        self.broker_id = broker_id
        self.unclean_allowed = unclean_allowed
        self.spawn = spawn
        self.active = False
        self.epoch = -1
        self._epoch_version = -1
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None
        self._known_brokers: dict[int, int] = {}  # broker id -> registration czxid, as last handled
        self._lock = asyncio.Lock()  # one pass or admin action (elections, reassignments) at a time
        self._rebalance_task: asyncio.Task[Any] | None = None
        self.rebalance_interval_s = 300.0
        self.imbalance_percentage = 10
        self.auto_rebalance = False
        store.listeners.append(self._on_event)

    # ---- election ---------------------------------------------------------------------------

    def _on_event(self, event: ClusterEvent) -> None:
        if event.kind == "session":
            # Our session expired: /controller went with it if it was ours. Stand again.
            if self.active:
                self._resign()
            self.spawn(self.elect())
        elif event.kind == "controller":
            if self.store.controller_id == -1:
                self.spawn(self.elect())
            elif self.store.controller_id != self.broker_id and self.active:
                self._resign()
        elif self.active:
            self._dirty.set()

    async def elect(self) -> None:
        """Try to become the controller: whoever creates /controller first wins."""
        store = self.store
        try:
            await store.run(store.zk.create, zl.CONTROLLER, zl.encode_controller(self.broker_id), None, True)
        except NodeExistsError:
            return
        except Exception as e:
            log.warning("controller election failed: %s", e)
            return
        try:
            self.epoch, self._epoch_version = await store.run(self._bump_epoch)
        except Exception as e:
            log.error("could not bump the controller epoch: %s", e)
            return
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, self.epoch)
        self.active = True
        self._known_brokers = {}
        self._dirty.set()
        if self._task is None or self._task.done():
            self._task = self.spawn(self._run())
        if self.auto_rebalance and (self._rebalance_task is None or self._rebalance_task.done()):
            self._rebalance_task = self.spawn(self._rebalance_loop())

    def _bump_epoch(self) -> tuple[int, int]:
        zk = self.store.zk
        while True:
            try:
                data, stat = zk.get(zl.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    zk.create(zl.CONTROLLER_EPOCH, zl.encode_epoch(1))
                    _, stat = zk.get(zl.CONTROLLER_EPOCH)
                    return 1, stat.version
                except NodeExistsError:
                    continue
            epoch = zl.decode_epoch(data) + 1
            try:
                new = zk.set(zl.CONTROLLER_EPOCH, zl.encode_epoch(epoch), version=stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    def _resign(self) -> None:
        log.info("broker %d is no longer the controller", self.broker_id)
        self.active = False

    async def stop(self) -> None:
        self.active = False
        for task in (self._task, self._rebalance_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # ---- the reconciling pass ---------------------------------------------------------------

    async def _run(self) -> None:
        while self.active:
            await self._dirty.wait()
            self._dirty.clear()
            if not self.active:
                break
            try:
                async with self._lock:
                    await self.reconcile()
            except _Fenced:
                log.warning("controller epoch %d was superseded; resigning", self.epoch)
                self._resign()
            except Exception:
                log.exception("controller pass failed; retrying")
                await asyncio.sleep(0.5)
                self._dirty.set()

    async def reconcile(self) -> None:
        store = self.store
        live = {b: r.epoch for b, r in store.brokers.items()}
        bounced = {b for b, e in live.items() if b in self._known_brokers and self._known_brokers[b] != e}
        # A bounced broker is handled as failed (leaders moved away, out of ISRs) and then as new.
        # A broker in a controlled shutdown is alive but leads nothing it can hand over.
        leaving = store.shutting_down & set(live)
        usable = set(live) - bounced - leaving
        deletes = await store.run(self._pending_deletes)
        if deletes:
            await store.run(self._delete_topics, deletes)
        changes: list[_Change] = []
        alive = set(live) - bounced
        for name, assignment in list(store.assignments.items()):
            if name in deletes:
                continue
            # A new topic's states are made once all of them have been read as missing (each read
            # brings another pass): in one batch, not in as many as the reads came in.
            unread = any(store.state(name, p) is None and not store.state_known(name, p) for p in assignment.replicas)
            for p, replicas in sorted(assignment.replicas.items()):
                current = store.state(name, p)
                if current is None and unread:
                    continue
                new = self._next_state(name, replicas, current, usable, alive, leaving)
                if new is not None:
                    changes.append((name, p, current, new))
        if changes:
            # New leaders first: a broker in a controlled shutdown waits for those, not for the
            # ISRs it leaves.
            changes.sort(key=lambda c: c[2] is not None and c[2].leader == c[3].leader)
            await self.write_states(changes)
        for name, assignment in list(store.assignments.items()):
            if name not in deletes and (assignment.adding or assignment.removing):
                await self._complete_reassignments(name, usable)
        self._known_brokers = live
        if bounced:
            self._dirty.set()  # a second pass lets the bounced brokers back in as new ones

    def _next_state(self, topic: str, replicas: list[int], current: PartitionState | None,
                    usable: set[int], alive: set[int], leaving: set[int]) -> PartitionState | None:
        """The state this partition should move to, or None when it is right as it is."""
        if current is None:
            live_replicas = [b for b in replicas if b in usable]
            if not live_replicas:
                return None  # made when one of its replicas registers
            return PartitionState(live_replicas[0], 0, tuple(live_replicas), self.epoch)
        leader_ok = current.leader in usable and current.leader in replicas
        isr = tuple(b for b in current.isr if b in alive and b in replicas)
        if leader_ok and any(b in leaving for b in isr) and len(isr) > 1:
            # A follower about to stop leaves the ISR now, so acks=all does not wait for it.
            isr = tuple(b for b in isr if b not in leaving) or isr
        if leader_ok:
            if isr == current.isr or current.leader not in isr:
                return None
            return PartitionState(current.leader, current.leader_epoch, isr, self.epoch, current.zk_version)
        # Elect: the first replica in assignment order that is live and in the ISR.
        candidates = [b for b in replicas if b in usable and b in current.isr]
        if candidates:
            leader = candidates[0]
            new_isr = tuple(b for b in isr if b in usable or b == leader) or (leader,)
            return PartitionState(leader, current.leader_epoch + 1, new_isr, self.epoch, current.zk_version)
        if current.leader in leaving:
            return None  # no other in-sync replica to take over: it leads until it stops
        live_replicas = [b for b in replicas if b in usable]
        if live_replicas and self.unclean_allowed(topic):
            leader = live_replicas[0]
            log.warning("%s: unclean leader election of broker %d (the ISR %s is gone): data may be lost",
                        topic, leader, list(current.isr))
            return PartitionState(leader, current.leader_epoch + 1, (leader,), self.epoch, current.zk_version)
        if current.leader == zl.NO_LEADER:
            return None  # offline already
        # Offline: no leader, and the ISR keeps its last member, who alone may lead it again.
        keep = current.isr if current.isr else (current.leader,)
        last = tuple(b for b in keep if b in replicas)[-1:] or keep[-1:]
        log.warning("%s: no in-sync replica is alive (ISR %s); the partition is offline", topic, list(current.isr))
        return PartitionState(zl.NO_LEADER, current.leader_epoch + 1, last, self.epoch, current.zk_version)

    async def write_states(self, changes: list[_Change]) -> None:
        """Write new partition states, _STATE_BATCH per ZooKeeper transaction; what was written
        is in this broker's cache at once. A state that changed under us is left to the next pass."""
        store = self.store
        started = time.monotonic()
        moved = sum(1 for _, _, cur, new in changes if cur is not None and cur.leader != new.leader)
        written_count = refused_count = 0
        for i in range(0, len(changes), _STATE_BATCH):
            written, refused = await store.run(self._commit_states, changes[i:i + _STATE_BATCH])
            for topic, p, state in written:
                store.learned_state(topic, p, state)
            written_count += len(written)
            refused_count += len(refused)
        if refused_count:
            self._dirty.set()  # read again (the watches bring the newer states) and decide again
        if len(changes) > 1:
            log.info("wrote %d partition states (%d new, %d leaders moved, %d refused: changed meanwhile) "
                     "in %d transactions, %.0f ms", written_count, sum(1 for c in changes if c[2] is None), moved,
                     refused_count, -(-len(changes) // _STATE_BATCH), (time.monotonic() - started) * 1000)

    def _commit_states(self, changes: list[_Change]) -> tuple[list[tuple[str, int, PartitionState]], list[_Change]]:
        """Blocking: one transaction for ``changes`` (fenced by the controller epoch's znode
        version, each state a compare-and-set on its version, a new one created with its partition
        node). A change refused in it (its state changed meanwhile) is set aside and the rest
        committed again. Returns (what was written, with its new version; what was refused)."""
        zk = self.store.zk
        for topic in sorted({c[0] for c in changes if c[2] is None}):
            zk.ensure_path(zl.partitions_path(topic))
        pending = list(changes)
        refused: list[_Change] = []
        written: list[tuple[str, int, PartitionState]] = []
        while pending:
            txn = zk.transaction()
            txn.check(zl.CONTROLLER_EPOCH, self._epoch_version)
            owner = [-1]  # the change each operation belongs to
            for i, (topic, p, current, new) in enumerate(pending):
                if current is None:
                    txn.create(zl.partition_path(topic, p), b"")
                    txn.create(zl.state_path(topic, p), zl.encode_state(new))
                    owner += [i, i]
                else:
                    txn.set_data(zl.state_path(topic, p), zl.encode_state(new), version=current.zk_version)
                    owner.append(i)
            results = txn.commit()
            failed = {owner[k]: r for k, r in enumerate(results)
                      if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))}
            if not failed:
                for topic, p, current, new in pending:
                    version = 0 if current is None else current.zk_version + 1
                    written.append((topic, p, dataclasses.replace(new, zk_version=version)))
                    if current is None or current.leader != new.leader:
                        log.info("%s-%d: leader %d, epoch %d, isr %s", topic, p, new.leader, new.leader_epoch,
                                 list(new.isr))
                break
            if isinstance(results[0], BadVersionError):
                raise _Fenced()
            if -1 in failed:
                raise RuntimeError(f"state transaction failed: {results!r}")
            for i, error in failed.items():
                topic, p, current, new = pending[i]
                # A partition node left from before, its state never made: that one alone.
                if current is None and isinstance(error, NodeExistsError) and self._write_state(topic, p, None, new):
                    written.append((topic, p, dataclasses.replace(new, zk_version=0)))
                else:
                    log.debug("%s-%d: state write refused (%r); will look again", topic, p, error)
                    refused.append(pending[i])
            pending = [c for i, c in enumerate(pending) if i not in failed]
        return written, refused

    def _write_state(self, topic: str, partition: int, current: PartitionState | None, new: PartitionState) -> bool:
        """Blocking: one transaction, fenced by the controller epoch's znode version. False when
        the state had changed since ``current`` was read (nothing written)."""
        zk = self.store.zk
        if current is None:
            zk.ensure_path(zl.partition_path(topic, partition))  # holds nothing: no need to fence it
        txn = zk.transaction()
        txn.check(zl.CONTROLLER_EPOCH, self._epoch_version)
        if current is None:
            txn.create(zl.state_path(topic, partition), zl.encode_state(new))
        else:
            txn.set_data(zl.state_path(topic, partition), zl.encode_state(new), version=current.zk_version)
        results = txn.commit()
        if not any(isinstance(r, Exception) for r in results):
            if current is None or current.leader != new.leader:
                log.info("%s-%d: leader %d, epoch %d, isr %s", topic, partition, new.leader, new.leader_epoch,
                         list(new.isr))
            return True
        if isinstance(results[0], BadVersionError):
            raise _Fenced()
        # The state changed under us (a leader's ISR update, or made by a pass before): the watch
        # brings the new state, and with it another pass.
        log.debug("%s-%d: state write refused (%s); will look again", topic, partition, results[1])
        return False

    # ---- preferred leaders (ElectLeaders, auto.leader.rebalance.enable) -------------------------

    async def elect_leaders(self, partitions: list[tuple[str, int]], unclean: bool) -> dict[tuple[str, int], tuple[E, str | None]]:
        """ElectLeaders: PREFERRED moves each partition's leadership to its first replica when that
        one is live and in sync; UNCLEAN elects any live replica of a partition without a live leader
        and in-sync replica. Answers per partition (Kafka's errors)."""
        results: dict[tuple[str, int], tuple[E, str | None]] = {}
        async with self._lock:
            store = self.store
            live = set(store.brokers) - store.shutting_down
            for topic, p in partitions:
                assignment = store.assignments.get(topic)
                state = store.state(topic, p)
                if assignment is None or p not in assignment.replicas or state is None:
                    results[(topic, p)] = (E.unknown_topic_or_partition, None)
                    continue
                # The watched state may trail ZooKeeper (this controller's own write a moment ago,
                # a leader's ISR change): a refused write reads it again and decides again.
                for _ in range(_ELECTION_ATTEMPTS):
                    decided = self._election(assignment.replicas[p], state, live, unclean)
                    if not isinstance(decided, PartitionState):
                        results[(topic, p)] = decided
                        break
                    try:
                        if await store.run(self._write_state, topic, p, state, decided):
                            results[(topic, p)] = (E.none, None)
                            break
                        fresh = await store.run(store.read_state, topic, p)
                    except _Fenced:
                        results[(topic, p)] = (E.not_controller, None)
                        break
                    if fresh is None:
                        results[(topic, p)] = (E.unknown_topic_or_partition, None)
                        break
                    state = fresh
                else:
                    results[(topic, p)] = (E.request_timed_out, "the partition's state kept changing")
        return results

    def _election(self, replicas: list[int], state: PartitionState, live: set[int],
                  unclean: bool) -> PartitionState | tuple[E, str | None]:
        """The state an ElectLeaders request asks for, or why there is nothing to write."""
        if unclean:
            if state.leader in live:
                return E.election_not_needed, None
            candidates = [b for b in replicas if b in live]
            if not candidates:
                return E.eligible_leaders_not_available, "no live replica"
            in_sync = [b for b in candidates if b in state.isr]
            leader = (in_sync or candidates)[0]
            isr = tuple(b for b in state.isr if b in live) if in_sync else (leader,)
        else:
            leader = replicas[0]
            if state.leader == leader:
                return E.election_not_needed, None
            if leader not in live or leader not in state.isr:
                return E.preferred_leader_not_available, f"preferred replica {leader} is not live and in sync"
            isr = state.isr
        return PartitionState(leader, state.leader_epoch + 1, isr, self.epoch, state.zk_version)

    def preferred_imbalance(self) -> list[tuple[str, int]]:
        """Partitions to move back to their preferred leader: those of every broker whose share of
        preferred partitions led elsewhere is above leader.imbalance.per.broker.percentage."""
        store = self.store
        by_broker: dict[int, list[tuple[str, int, bool]]] = {}
        for name, assignment in store.assignments.items():
            for p, replicas in assignment.replicas.items():
                state = store.state(name, p)
                if not replicas or state is None:
                    continue
                by_broker.setdefault(replicas[0], []).append((name, p, state.leader == replicas[0]))
        out = []
        live = set(store.brokers) - store.shutting_down
        for broker_id, parts in by_broker.items():
            if broker_id not in live:
                continue
            elsewhere = [(t, p) for t, p, led in parts if not led]
            if parts and len(elsewhere) * 100 > self.imbalance_percentage * len(parts):
                out += [(t, p) for t, p in elsewhere
                        if (s := store.state(t, p)) is not None and broker_id in s.isr]
        return out

    async def _rebalance_loop(self) -> None:
        while self.active:
            await asyncio.sleep(self.rebalance_interval_s)
            moving = self.preferred_imbalance()
            if moving and self.active:
                log.info("moving %d partitions back to their preferred leaders", len(moving))
                await self.elect_leaders(moving, unclean=False)

    # ---- reassignment (AlterPartitionReassignments) ------------------------------------------

    async def reassign(self, topic: str, partition: int, target: list[int] | None) -> tuple[E, str | None]:
        """Start (or with ``target`` None cancel) moving a partition's replicas, as Kafka's KIP-455:
        the replicas become target + original, the new ones catch up and join the ISR, then the
        partition keeps only the target replicas (a leader outside them hands over first)."""
        async with self._lock:
            store = self.store
            assignment = store.assignments.get(topic)
            if assignment is None or partition not in assignment.replicas:
                return E.unknown_topic_or_partition, None
            current = assignment.replicas[partition]
            adding = assignment.adding.get(partition, [])
            original = [b for b in current if b not in adding]
            if target is None:
                if not adding and not assignment.removing.get(partition):
                    return E.no_reassignment_in_progress, None
                new_replicas, new_adding, new_removing = original, [], []
            else:
                if not target or len(set(target)) != len(target):
                    return E.invalid_replica_assignment, "replicas must be distinct and not empty"
                unknown = [b for b in target if b not in store.brokers]
                if unknown:
                    return E.invalid_replica_assignment, f"brokers {unknown} are not registered"
                new_replicas = target + [b for b in original if b not in target]
                new_adding = [b for b in target if b not in original]
                new_removing = [b for b in original if b not in target]
            written = await store.run(self._write_assignment, topic, partition, new_replicas, new_adding, new_removing)
            store.assignments[topic] = written  # at once: a ListPartitionReassignments right after sees it
            log.info("%s-%d: reassigning %s -> %s", topic, partition, current, target if target is not None else original)
        self._dirty.set()
        return E.none, None

    async def _complete_reassignments(self, topic: str, usable: set[int]) -> None:
        """Finish each reassignment whose target replicas are all in the ISR."""
        store = self.store
        assignment = store.assignments.get(topic)
        if assignment is None:
            return
        for p in sorted(set(assignment.adding) | set(assignment.removing)):
            removing = assignment.removing.get(p, [])
            target = [b for b in assignment.replicas[p] if b not in removing]
            state = store.state(topic, p)
            if state is None or not all(b in state.isr for b in target):
                continue
            new: PartitionState | None = None
            if state.leader not in target:
                leaders = [b for b in target if b in usable]
                if not leaders:
                    continue
                new = PartitionState(leaders[0], state.leader_epoch + 1, tuple(b for b in state.isr if b in target),
                                     self.epoch, state.zk_version)
            elif any(b not in target for b in state.isr):
                new = PartitionState(state.leader, state.leader_epoch, tuple(b for b in state.isr if b in target),
                                     self.epoch, state.zk_version)
            if new is not None and not await store.run(self._write_state, topic, p, state, new):
                # The state changed since it was read: the reassignment is not done until a write
                # on the new state moves the leadership off the removed replicas (the next pass).
                continue
            store.assignments[topic] = await store.run(self._write_assignment, topic, p, target, [], [])
            log.info("%s-%d: reassignment done, replicas %s", topic, p, target)

    def _write_assignment(self, topic: str, partition: int, replicas: list[int], adding: list[int],
                          removing: list[int]) -> zl.TopicAssignment:
        """Blocking: one partition's replicas in the topic node, fenced like every controller write."""
        zk = self.store.zk
        data, stat = zk.get(zl.topic_path(topic))
        current = zl.decode_topic(topic, data)

        def put(d: dict[int, list[int]], value: list[int]) -> dict[int, list[int]]:
            out = {k: v for k, v in d.items() if k != partition}
            if value:
                out[partition] = value
            return out

        new = zl.TopicAssignment(topic, current.topic_id, {**current.replicas, partition: replicas},
                                 put(current.adding, adding), put(current.removing, removing))
        txn = zk.transaction()
        txn.check(zl.CONTROLLER_EPOCH, self._epoch_version)
        txn.set_data(zl.topic_path(topic), zl.encode_topic(new), version=stat.version)
        results = txn.commit()
        if isinstance(results[0], BadVersionError):
            raise _Fenced()
        if any(isinstance(r, Exception) for r in results):
            raise RuntimeError(f"{topic}: the topic node changed meanwhile ({results[1]!r})")
        return new

    # ---- topic deletion ---------------------------------------------------------------------

    def _pending_deletes(self) -> list[str]:
        try:
            return list(self.store.zk.get_children(zl.DELETE_TOPICS))
        except NoNodeError:
            return []

    def _delete_topics(self, names: list[str]) -> None:
        """Blocking: remove the topics' znodes in batches of ZooKeeper transactions, each fenced by
        the controller epoch, children before parents (Kafka's controller deletes a topic's tree
        once its replicas have stopped; brokers here drop a topic's partitions and logs when its
        topic node goes). Each topic's last transaction removes its topic node, its config and its
        deletion request together, so the topic ceases to exist in one step and a topic of the same
        name created afterwards is never taken for this one (its config, or the request).
        The trees are read assuming Kafka's layout below the partitions node (a state in each
        partition node); when that guess fails, what is left is read in full and deleted."""
        started = time.monotonic()
        removed = transactions = 0
        read_s = 0.0
        for assume in (zl.assumed_children, lambda path: None):
            t = time.monotonic()
            units = self._deletion_units(names, assume)
            read_s += time.monotonic() - t
            batches = _pack(units, _DELETE_BATCH)
            for batch in batches:
                if not self._delete_batch(batch):
                    log.info("deleting topics %s: the tree is not as assumed; reading it in full", names)
                    break
                removed += len(batch)
                transactions += 1
            else:
                break
        else:
            raise RuntimeError(f"deleting topics {names}: a node went or came meanwhile; trying again")
        for name in names:
            log.info("deleted topic %s", name)
        log.info("deleted %d topics: %d znodes in %d transactions, %.0f ms (%.0f ms of it reading them)",
                 len(names), removed, transactions, (time.monotonic() - started) * 1000, read_s * 1000)

    def _deletion_units(self, names: list[str], assume: Callable[[str], list[str] | None]) -> list[list[str]]:
        """Blocking: the topics' znodes in the order they can go, grouped by what must go in one
        transaction."""
        units: list[list[str]] = []
        trees = self.store.subtrees_bottom_up([path for name in names for path in (
            zl.topic_path(name), zl.topic_config_path(name), zl.delete_topic_path(name))], assume)
        for topic, config, request in zip(trees[0::3], trees[1::3], trees[2::3], strict=True):
            units += [[path] for path in topic[:-1]]  # the partitions and their states
            last = topic[-1:] + config + request
            if last:
                units.append(last)
        return units

    def _delete_batch(self, batch: list[str]) -> bool:
        """Blocking: one fenced transaction deleting ``batch`` in order; False when a node in it is
        missing or has children (nothing deleted then)."""
        txn = self.store.zk.transaction()
        txn.check(zl.CONTROLLER_EPOCH, self._epoch_version)
        for path in batch:
            txn.delete(path)
        results = txn.commit()
        if isinstance(results[0], BadVersionError):
            raise _Fenced()
        failed = [(path, r) for path, r in zip(batch, results[1:], strict=True)
                  if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if isinstance(results[0], Exception) and not isinstance(results[0], (RolledBackError, RuntimeInconsistency)):
            raise RuntimeError(f"controller epoch check failed: {results[0]!r}")
        if failed:
            log.debug("deletion refused: %r", failed[:3])
        return not failed


def _pack(units: list[list[str]], limit: int) -> list[list[str]]:
    """Consecutive units into batches of at most ``limit`` paths, a unit never split."""
    batches: list[list[str]] = []
    for unit in units:
        if not batches or len(batches[-1]) + len(unit) > limit:
            batches.append([])
        batches[-1].extend(unit)
    return batches


_ELECTION_ATTEMPTS = 3  # re-reads of a partition state that changed under an ElectLeaders write
# Partition states per ZooKeeper transaction: a new one is two operations of ~150 bytes, so a batch
# stays far below ZooKeeper's 1 MB request limit (jute.maxbuffer).
_STATE_BATCH = 500
# Deletions per ZooKeeper transaction: a delete is its path and a version (~70 bytes for a
# partition's state), so 1,000 of them stay far below ZooKeeper's 1 MB request limit.
_DELETE_BATCH = 1000
_Change = tuple[str, int, "PartitionState | None", PartitionState]  # topic, partition, current, new


class _Fenced(Exception):
    """Another controller has a newer epoch."""
