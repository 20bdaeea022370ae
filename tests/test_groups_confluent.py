"""Consumer groups with confluent-kafka (librdkafka): sharing, broadcast, rebalances, static members."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_admin, confluent_produce, wait_until
from test_groups_common import (
    FAST_CONSUMER,
    ConsumerProcess,
    create_topics,
    group_broker_fixture,
    poll_all,
    values,
)


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from group_broker_fixture(tmp_path_factory)


def _slowly(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> list[Any]:
    time.sleep(0.05)
    return confluent_produce(bootstrap, topic, records)


def _consumer(bootstrap: str, group: str, **config: Any) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, **FAST_CONSUMER, **config})


def test_lone_consumer_joins_fast(gbroker: BrokerProcess) -> None:
    """With group.initial.rebalance.delay.ms=0 a lone member's first join takes well under a second."""
    create_topics(gbroker.bootstrap, {"g-fast": 1})
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": "fast", "auto.offset.reset": "earliest"})
    assigned: list[float] = []
    t0 = time.monotonic()
    c.subscribe(["g-fast"], on_assign=lambda _c, ps: assigned.append(time.monotonic() - t0))
    try:
        poll_all([c], lambda: bool(assigned), 10, lambda i, m: None, "assignment")
    finally:
        c.close()
    assert assigned[0] < 1.0, f"first join took {assigned[0]:.2f}s"


@pytest.mark.timeout(90)
def test_three_members_share_partitions_and_second_group_gets_everything(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"g-share": 6})
    members = [_consumer(bs, "share") for _ in range(3)]
    assignments: list[set[int]] = [set(), set(), set()]
    seen: list[list[tuple[int, int]]] = [[], [], []]
    for i, c in enumerate(members):
        c.subscribe(["g-share"],
                    on_assign=lambda _c, ps, i=i: assignments[i].update(p.partition for p in ps),
                    on_revoke=lambda _c, ps, i=i: assignments[i].difference_update(p.partition for p in ps))

    def record(i: int, m: Any) -> None:
        seen[i].append((m.partition(), m.offset()))

    try:
        poll_all(members, lambda: all(assignments) and sum(len(a) for a in assignments) == 6, 30, record,
                 "three members assigned")
        final = [set(a) for a in assignments]
        # Produced once the group is stable, so every record is read by its partition's one owner.
        delivered = confluent_produce(bs, "g-share", values(600))
        assert {d.partition for d in delivered} == set(range(6))
        poll_all(members, lambda: sum(len(s) for s in seen) >= 600, 30, record, "600 records")
        assert assignments == final  # no rebalance meanwhile
    finally:
        for c in members:
            c.close()
    assert set().union(*final) == set(range(6))
    assert all(not (final[a] & final[b]) for a in range(3) for b in range(a + 1, 3))
    everything = [r for s in seen for r in s]
    assert Counter(everything).most_common(1)[0][1] == 1, "a record was delivered twice"
    assert set(everything) == {(d.partition, d.offset) for d in delivered}
    for i in range(3):  # each member read only its own partitions
        assert {p for p, _ in seen[i]} <= final[i]

    other = _consumer(bs, "share-2")
    got: list[tuple[int, int]] = []
    other.subscribe(["g-share"])
    try:
        poll_all([other], lambda: len(got) >= 600, 30, lambda i, m: got.append((m.partition(), m.offset())),
                 "second group")
    finally:
        other.close()
    assert sorted(got) == sorted(everything)


@pytest.mark.timeout(120)
def test_rebalances_lose_nothing_and_duplicate_only_uncommitted(gbroker: BrokerProcess) -> None:
    """Members leave, crash and join while records flow.

    Every record must be processed (none lost). Members commit each record right after processing
    it, so a record can be processed twice only if its commit did not succeed: the member died
    between processing and committing (SIGKILL), or the commit was refused because a rebalance had
    started (REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION). That is the at-least-once bound checked.
    """
    bs = gbroker.bootstrap
    create_topics(bs, {"g-rebal": 6})
    procs = [ConsumerProcess(bs, "rebal", "g-rebal", f"m{i}") for i in range(3)]
    produced: list[Any] = []
    try:
        # Every member with its share, not one member holding all six while the others still join.
        wait_until(lambda: all(p.assignment() for p in procs) and sum(len(p.assignment()) for p in procs) == 6,
                   30, what="3 members assigned")
        produced += confluent_produce(bs, "g-rebal", values(150, 0))
        wait_until(lambda: len({r for p in procs for r in p.processed()}) >= 150, 30, what="phase 1 consumed")

        procs[0].close()  # leaves: LeaveGroup, its partitions move at once
        produced += confluent_produce(bs, "g-rebal", values(150, 150))
        wait_until(lambda: sum(len(p.assignment()) for p in procs[1:]) == 6, 30, what="rebalance after leave")

        victim = procs[1]
        before = len(victim.processed())
        trickle = threading.Thread(target=lambda: produced.extend(
            d for i in range(300, 450, 10) for d in _slowly(bs, "g-rebal", values(10, i))))
        trickle.start()
        wait_until(lambda: len(victim.processed()) > before + 5, 30, what="victim busy")
        victim.kill()  # crash mid-stream: its partitions move after the session timeout (3 s)
        trickle.join(60)
        wait_until(lambda: len(procs[2].assignment()) == 6, 30, what="partitions of the crashed member moved")

        procs.append(ConsumerProcess(bs, "rebal", "g-rebal", "m3"))  # joins
        wait_until(lambda: len(procs[3].assignment()) > 0 and sum(len(p.assignment()) for p in procs[2:]) == 6,
                   30, what="rebalance after join")
        produced += confluent_produce(bs, "g-rebal", values(150, 450))
        all_records = {(d.partition, d.offset) for d in produced}
        wait_until(lambda: {r for p in procs for r in p.processed()} >= all_records, 40, what="all consumed")
    finally:
        for p in procs:
            p.close() if p.proc.poll() is None else p.kill()

    processed = Counter(r for p in procs for r in p.processed())
    assert set(processed) >= all_records, f"lost: {sorted(all_records - set(processed))[:10]}"
    duplicates = {r for r, n in processed.items() if n > 1}
    # A duplicate's first processing must be one whose commit never succeeded.
    uncommitted = {r for p in procs for r in p.processed() if r not in p.committed_ok()}
    assert duplicates <= uncommitted, f"duplicates of committed records: {sorted(duplicates - uncommitted)}"
    assert len(duplicates) <= len(uncommitted) <= 12, (len(duplicates), len(uncommitted))


@pytest.mark.timeout(90)
def test_cooperative_sticky_keeps_partitions_that_stay(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"g-coop": 6})
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    first = ConsumerProcess(bs, "coop", "g-coop", "a", **coop)
    procs = [first]
    try:
        wait_until(lambda: first.assignment() == set(range(6)), 30, what="first member owns all")
        procs.append(ConsumerProcess(bs, "coop", "g-coop", "b", **coop))
        procs.append(ConsumerProcess(bs, "coop", "g-coop", "c", **coop))
        wait_until(lambda: all(len(p.assignment()) == 2 for p in procs), 40, what="2 partitions each")
        kept = first.assignment()
        revoked = [set(e["parts"]) for e in first.snapshot() if e["ev"] == "revoke"]
        # Incremental: only partitions handed to the newcomers were ever revoked from the first member.
        assert revoked and all(not (r & kept) for r in revoked)
        assert set().union(*revoked) == set(range(6)) - kept
        owners = [p.assignment() for p in procs]
        assert set().union(*owners) == set(range(6))
    finally:
        for p in procs:
            p.close()


@pytest.mark.timeout(90)
def test_static_member_restart_gets_same_partitions_without_rebalance(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"g-static": 4})
    static = {"session.timeout.ms": 10000}
    a = ConsumerProcess(bs, "static", "g-static", "a", **{"group.instance.id": "inst-a"}, **static)
    b = ConsumerProcess(bs, "static", "g-static", "b", **{"group.instance.id": "inst-b"}, **static)
    procs = [a, b]
    try:
        wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, what="stable group")
        b_parts = b.assignment()
        a_events = len(a.snapshot())
        log_from = len(gbroker.log_lines)
        b.close()  # a static member does not send LeaveGroup: the group waits for it
        b2 = ConsumerProcess(bs, "static", "g-static", "b", **{"group.instance.id": "inst-b"}, **static)
        procs.append(b2)
        wait_until(lambda: b2.assignment(), 20, what="restarted member assigned")
        assert b2.assignment() == b_parts
        # The coordinator decides at the rejoin, before it answers it: it says which way it went, and
        # a rebalance it started would be in its log before that line. The log comes through a pipe
        # read by a thread, so the line is waited for (b2's answer may come first).
        gbroker.wait_for_log("static member inst-b of group static rejoined", since=log_from)
        since = gbroker.log_lines[log_from:]
        assert not any("preparing to rebalance group static " in line for line in since), since[-20:]
        assert [e for e in a.snapshot()[a_events:] if e["ev"] in ("assign", "revoke")] == []
        assert len(a.assignment()) == 2
    finally:
        for p in procs:
            p.close()


@pytest.mark.timeout(60)
def test_new_partitions_are_picked_up_by_rebalance(gbroker: BrokerProcess) -> None:
    """Rejoin on metadata change is client-side: the leader sees new partitions and rejoins."""
    from confluent_kafka.admin import NewPartitions

    bs = gbroker.bootstrap
    create_topics(bs, {"g-grow": 2})
    procs = [ConsumerProcess(bs, "grow", "g-grow", f"m{i}") for i in range(2)]
    try:
        wait_until(lambda: sum(len(p.assignment()) for p in procs) == 2, 30, what="initial assignment")
        admin = confluent_admin(bs)  # keep a reference: a collected client cancels its requests
        futures = admin.create_partitions([NewPartitions("g-grow", 4)])
        for f in futures.values():
            f.result(20)
        wait_until(lambda: set().union(*(p.assignment() for p in procs)) == set(range(4)), 30,
                   what="new partitions assigned")
        delivered = confluent_produce(bs, "g-grow", [{"value": b"x", "partition": p} for p in range(4)])
        wanted = {(d.partition, d.offset) for d in delivered}
        wait_until(lambda: {r for p in procs for r in p.processed()} >= wanted, 20, what="new partitions consumed")
    finally:
        for p in procs:
            p.close()


@pytest.mark.timeout(60)
def test_pattern_subscription_picks_up_new_topic(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    create_topics(bs, {"gpat-1": 1})
    c = _consumer(bs, "pattern")
    seen: set[str] = set()
    c.subscribe(["^gpat-.*"])
    try:
        confluent_produce(bs, "gpat-1", values(1))
        poll_all([c], lambda: "gpat-1" in seen, 20, lambda i, m: seen.add(m.topic()), "first topic")
        create_topics(bs, {"gpat-2": 1})
        confluent_produce(bs, "gpat-2", values(1))
        poll_all([c], lambda: "gpat-2" in seen, 30, lambda i, m: seen.add(m.topic()), "new topic")
    finally:
        c.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stop", ["restart", "sigkill", "sigkill-fsync"])
def test_committed_offsets_survive_broker_restart(tmp_path: Path, stop: str) -> None:
    """Clean restart; SIGKILL with commits in the page cache; SIGKILL with commits fsynced before the ack."""
    from confluent_kafka import TopicPartition
    from test_groups_common import start_group_broker

    fsync = {"log.flush.interval.messages": "1"} if stop == "sigkill-fsync" else {}
    b = start_group_broker(tmp_path / "data", **fsync)
    try:
        bs = b.bootstrap
        create_topics(bs, {"g-dur": 3})
        delivered = confluent_produce(bs, "g-dur", values(300))
        c = _consumer(bs, "durable")
        c.subscribe(["g-dur"])
        got: list[Any] = []
        poll_all([c], lambda: len(got) >= 100, 30, lambda i, m: got.append(m), "first 100")
        for m in got:  # commit exactly what was processed, with metadata
            c.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1, "meta-1")],
                     asynchronous=False)
        expected = {}
        for m in got:
            expected[m.partition()] = max(expected.get(m.partition(), 0), m.offset() + 1)
        c.close()

        if stop == "restart":
            b.restart()
        else:
            b.kill()  # commits were acknowledged, so they are in the log (page cache or disk)
            b.start()

        c = _consumer(bs, "durable")
        committed = c.committed([TopicPartition("g-dur", p) for p in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == expected
        assert all(tp.metadata == "meta-1" for tp in committed if tp.offset >= 0)
        c.subscribe(["g-dur"])
        resumed: list[Any] = []
        poll_all([c], lambda: len(resumed) >= 200, 30, lambda i, m: resumed.append(m), "resume")
        c.close()
        first = {}
        for m in resumed:
            first.setdefault(m.partition(), m.offset())
        assert all(first[p] == expected.get(p, 0) for p in first)
        consumed = {(m.partition(), m.offset()) for m in got + resumed}
        assert consumed == {(d.partition, d.offset) for d in delivered}
        assert len(got) + len(resumed) == 300  # nothing consumed twice
    finally:
        b.stop()
