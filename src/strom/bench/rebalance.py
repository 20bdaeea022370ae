"""How long a consumer group takes to absorb one more member, classic cooperative-sticky against the
consumer protocol (KIP-848), against one broker in the same run; and how long partitions pause meanwhile.

A steady producer (its own process) writes ``rate`` records/s to every partition of one topic.
``members`` confluent-kafka consumers (threads in ``procs`` worker processes) form a group; once it is
stable and has consumed steadily for ``steady_s`` seconds, one more member (in a process of its own,
started in advance) subscribes. Measured, from the moment it is told to subscribe:

- **assigned**: until every partition is owned by exactly one member and the assignment is balanced
  (each member's rebalance callbacks have run): the last assign/revoke callback;
- **stable**: until the broker also describes the group as Stable with every member (polled every
  0.1 s): for the consumer protocol, every member has reached the new epoch;
- **joiner's first record**: the new member's first record;
- **pause of an unmoved partition**: for the partitions that keep their owner (and are never revoked),
  the longest gap between two consecutive records consumed, over the gaps that overlap the rebalance
  (the subscribe to "stable"); beside it the longest gap of the ``steady_s`` before the join, which is
  what the producer's rate and the fetch path give without a rebalance;
- **pause of a moved partition**: from its old owner's last record to its new owner's first.

Every wait is bounded by ``timeout`` seconds. Worker processes are spawned (not forked: librdkafka's
threads do not survive a fork).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("classic", "consumer")


def _log(message: str) -> None:
    print(message, flush=True)  # progress, also when stdout is a file
DESCRIBE_INTERVAL_S = 0.1
REPORT_INTERVAL_S = 0.5


def consumer_config(protocol: str, bootstrap: str, group: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Client defaults except what picks the protocol (and cooperative-sticky for the classic one)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest"}
    if protocol == "classic":
        conf.update({"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"})
    elif protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    conf.update(extra or {})
    return conf


# ---------------------------------------------------------------------------------------------- workers


def _member(idx: int, conf: dict[str, Any], topic: str, go: Any, stop: Any, events: Any, results: Any,
            timeout: float) -> None:
    from confluent_kafka import Consumer

    if go is not None and not go.wait(timeout):
        results.put((idx, {}))
        return
    times: dict[int, list[float]] = defaultdict(list)

    def callback(kind: str) -> Callable[[Any, list[Any]], None]:
        return lambda _c, parts: events.put((idx, time.time(), kind, [p.partition for p in parts]))

    c = Consumer({**conf, "client.id": f"member-{idx}"})
    try:
        c.subscribe([topic], on_assign=callback("assign"), on_revoke=callback("revoke"), on_lost=callback("lost"))
        events.put((idx, time.time(), "started", []))
        last_report = 0.0
        while not stop.is_set():
            msgs = c.consume(1000, 0.2)
            now = time.time()
            for m in msgs:
                partition = m.partition()
                if m.error() is None and partition is not None:
                    times[partition].append(now)
            if now - last_report >= REPORT_INTERVAL_S:
                last_report = now
                events.put((idx, now, "seen", [p for p, ts in times.items() if ts and ts[-1] > now - 1.0]))
        results.put((idx, dict(times)))
    finally:
        c.close()


def _worker(members: list[int], conf: dict[str, Any], topic: str, go: Any, stop: Any, events: Any, results: Any,
            timeout: float) -> None:
    threads = [threading.Thread(target=_member, args=(i, conf, topic, go, stop, events, results, timeout),
                                daemon=True) for i in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _producer(bootstrap: str, topic: str, partitions: int, rate: float, stop: Any, properties: dict[str, Any]) -> None:
    """``rate`` records/s to each partition, round robin, paced in 10 ms steps."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, **properties})
    value = b"x" * 100
    start = time.monotonic()
    sent = 0
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate * partitions)
        while sent < due:
            try:
                p.produce(topic, value, partition=sent % partitions)
            except BufferError:
                p.poll(0.01)
                continue
            sent += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(10)


# ---------------------------------------------------------------------------------------------- one phase


@dataclass
class PhaseResult:
    protocol: str
    members: int
    partitions: int
    assigned_s: float
    stable_s: float
    joiner_first_record_s: float | None
    unmoved: int
    moved: int
    unmoved_pause_max_s: float
    unmoved_pause_p99_s: float
    unmoved_pause_median_s: float
    steady_gap_max_s: float  # the same, per partition, over the steady window before the join
    steady_gap_p99_s: float
    steady_gap_median_s: float
    moved_pause_max_s: float | None
    moved_pause_median_s: float | None
    revoked_unmoved: int = 0  # partitions revoked and given back to the same member (eager-style)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Ownership:
    def __init__(self) -> None:
        self.owned: dict[int, set[int]] = defaultdict(set)
        self.started: set[int] = set()
        self.last_change = 0.0
        self.revoked_after: dict[int, float] = {}  # partition -> last revoke time (any member)
        self.seen: dict[int, float] = {}  # partition -> last report time that it was being consumed

    def apply(self, ev: tuple[int, float, str, list[int]]) -> None:
        idx, t, kind, parts = ev
        if kind == "started":
            self.started.add(idx)
        elif kind == "assign":
            self.owned[idx] |= set(parts)
            self.last_change = max(self.last_change, t)
        elif kind in ("revoke", "lost"):
            self.owned[idx] -= set(parts)
            self.last_change = max(self.last_change, t)
            for p in parts:
                self.revoked_after[p] = t
        elif kind == "seen":
            for p in parts:
                self.seen[p] = t

    def balanced(self, members: set[int], partitions: int) -> bool:
        sizes = [len(self.owned.get(i, ())) for i in members]
        union: set[int] = set()
        total = 0
        for i in members:
            union |= self.owned.get(i, set())
            total += len(self.owned.get(i, ()))
        others = sum(len(s) for i, s in self.owned.items() if i not in members)
        return (total == partitions == len(union) and others == 0 and max(sizes) - min(sizes) <= 1)

    def owner_map(self) -> dict[int, int]:
        return {p: i for i, ps in self.owned.items() for p in ps}


def _drain(events: Any, own: _Ownership, wait: float) -> None:
    try:
        own.apply(events.get(timeout=wait))
        while True:
            own.apply(events.get_nowait())
    except queue.Empty:
        pass


def _group_state(admin: Any, group: str) -> tuple[str, int]:
    d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return str(getattr(d.state, "name", d.state)), len(d.members)


def run_phase(bootstrap: str, topic: str, partitions: int, protocol: str, members: int, procs: int,
              steady_s: float, timeout: float, group: str, log: Callable[[str], None] = _log,
              client_extra: dict[str, Any] | None = None) -> PhaseResult:
    from confluent_kafka.admin import AdminClient

    ctx = mp.get_context("spawn")
    conf = consumer_config(protocol, bootstrap, group, client_extra)
    events, results = ctx.Queue(), ctx.Queue()
    stop, go = ctx.Event(), ctx.Event()
    joiner = members
    procs = max(1, min(procs, members))
    workers = [ctx.Process(target=_worker, args=(list(range(w, members, procs)), conf, topic, None, stop, events,
                                                 results, timeout), daemon=True) for w in range(procs)]
    workers.append(ctx.Process(target=_worker, args=([joiner], conf, topic, go, stop, events, results, timeout),
                               daemon=True))
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_extra or {})})
    own = _Ownership()
    first = set(range(members))
    everyone = first | {joiner}
    for w in workers:
        w.start()
    try:
        deadline = time.monotonic() + timeout
        log(f"{protocol}: {members} members forming over {partitions} partitions")
        while not (own.started >= first and own.balanced(first, partitions)
                   and _group_state(admin, group) == ("STABLE", members)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{protocol}: the first {members} members did not form a stable group "
                                   f"within {timeout:g}s")
            _drain(events, own, DESCRIBE_INTERVAL_S)
        formed = time.time()
        log(f"{protocol}: stable; consuming steadily for {steady_s:g}s")
        end_steady = time.monotonic() + steady_s
        while time.monotonic() < end_steady:  # the baseline window: a measurement period, not a wait for a cause
            _drain(events, own, 0.1)
        before = own.owner_map()
        if len(before) != partitions or own.last_change > formed:
            raise RuntimeError(f"{protocol}: the group moved partitions during the steady period")
        t_join = time.time()
        go.set()
        deadline = time.monotonic() + timeout
        t_stable = None
        while t_stable is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{protocol}: no stable group of {members + 1} within {timeout:g}s of the join")
            _drain(events, own, DESCRIBE_INTERVAL_S)
            if own.balanced(everyone, partitions) and _group_state(admin, group) == ("STABLE", members + 1):
                t_stable = time.time()
        t_assigned = own.last_change
        log(f"{protocol}: stable after {t_stable - t_join:.2f}s; waiting for every partition to be consumed again")
        while not all(own.seen.get(p, 0.0) > t_stable for p in range(partitions)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{protocol}: partitions not consumed after the rebalance: "
                                   f"{sorted(p for p in range(partitions) if own.seen.get(p, 0.0) <= t_stable)[:10]}")
            _drain(events, own, 0.2)
        after = own.owner_map()  # before the members close (and give their partitions up)
        revoked = dict(own.revoked_after)
        stop.set()
        timelines: dict[int, dict[int, list[float]]] = {}
        while len(timelines) < members + 1:
            try:
                idx, times = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"{protocol}: {members + 1 - len(timelines)} members did not report") from None
            timelines[idx] = times
    finally:
        stop.set()
        go.set()
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
                w.join()
    return _measure(protocol, members, partitions, before, after, revoked, timelines, t_join, t_assigned, t_stable,
                    steady_s, joiner)


def _gaps(ts: list[float], lo: float, hi: float) -> list[float]:
    """Gaps between consecutive records that overlap [lo, hi]."""
    return [b - a for a, b in zip(ts, ts[1:], strict=False) if b > lo and a < hi]


def _rank(sorted_values: list[float], q: float) -> float:
    return sorted_values[round(q * (len(sorted_values) - 1))] if sorted_values else 0.0


def _measure(protocol: str, members: int, partitions: int, before: dict[int, int], after: dict[int, int],
             revoked: dict[int, float], timelines: dict[int, dict[int, list[float]]], t_join: float, t_assigned: float,
             t_stable: float, steady_s: float, joiner: int) -> PhaseResult:
    unmoved = [p for p in range(partitions) if before.get(p) == after.get(p)
               and revoked.get(p, 0.0) < t_join]
    revoked_unmoved = sum(1 for p in range(partitions) if before.get(p) == after.get(p)
                          and revoked.get(p, 0.0) >= t_join)
    moved = [p for p in range(partitions) if before.get(p) != after.get(p)]
    unmoved_pauses = []
    steady_gaps = []  # per partition, its longest gap in the steady window
    for p in range(partitions):
        ts = timelines.get(before[p], {}).get(p, [])
        steady_gaps.append(max(_gaps(ts, t_join - steady_s, t_join), default=0.0))
        if p in unmoved:
            unmoved_pauses.append(max(_gaps(ts, t_join, t_stable), default=0.0))
    moved_pauses = []
    for p in moved:
        old = [t for t in timelines.get(before[p], {}).get(p, []) if t < t_stable]
        new = [t for t in timelines.get(after[p], {}).get(p, []) if t > t_join]
        if old and new:
            moved_pauses.append(new[0] - old[-1])
    joiner_times = [t for ts in timelines.get(joiner, {}).values() for t in ts]
    unmoved_pauses.sort()
    steady_gaps.sort()
    return PhaseResult(
        protocol=protocol, members=members, partitions=partitions,
        assigned_s=t_assigned - t_join, stable_s=t_stable - t_join,
        joiner_first_record_s=min(joiner_times) - t_join if joiner_times else None,
        unmoved=len(unmoved), moved=len(moved),
        unmoved_pause_max_s=_rank(unmoved_pauses, 1.0), unmoved_pause_p99_s=_rank(unmoved_pauses, 0.99),
        unmoved_pause_median_s=_rank(unmoved_pauses, 0.5),
        steady_gap_max_s=_rank(steady_gaps, 1.0), steady_gap_p99_s=_rank(steady_gaps, 0.99),
        steady_gap_median_s=_rank(steady_gaps, 0.5),
        moved_pause_max_s=max(moved_pauses) if moved_pauses else None,
        moved_pause_median_s=statistics.median(moved_pauses) if moved_pauses else None,
        revoked_unmoved=revoked_unmoved)


# ---------------------------------------------------------------------------------------------- the run


def run(bootstrap: str, *, members: int = 50, partitions: int = 1000, rate: float = 5.0, procs: int = 8,
        steady_s: float = 5.0, timeout: float = 180.0, runs: int = 1, protocols: tuple[str, ...] = PROTOCOLS,
        topic: str | None = None, create_topic: Callable[[str, int], None] | None = None,
        log: Callable[[str], None] = _log, properties: dict[str, Any] | None = None) -> list[PhaseResult]:
    """Both protocols (alternating when ``runs`` > 1) over one topic the steady producer writes to.
    ``properties``: librdkafka settings for every client (security, ...)."""
    properties = dict(properties or {})
    topic = topic or f"rebalance-{partitions}-{int(time.time())}"
    if create_topic is not None:
        create_topic(topic, partitions)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    producer = ctx.Process(target=_producer, args=(bootstrap, topic, partitions, rate, stop, properties),
                           daemon=True)
    producer.start()
    out = []
    try:
        for r in range(runs):
            order = protocols if r % 2 == 0 else tuple(reversed(protocols))
            for protocol in order:
                out.append(run_phase(bootstrap, topic, partitions, protocol, members, procs, steady_s, timeout,
                                     group=f"{topic}-{protocol}-{r}", log=log, client_extra=properties))
    finally:
        stop.set()
        producer.join(timeout=30)
        if producer.is_alive():
            producer.kill()
    return out


def summary_lines(results: list[PhaseResult]) -> list[str]:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    lines = ["times in seconds from the joiner's subscribe; pauses: per partition its longest gap between two "
             "records consumed (median / p99 / max over partitions)",
             f"{'protocol':9s} {'members':>8s} {'parts':>5s} {'assigned':>8s} {'stable':>7s} {'joiner 1st':>10s} "
             f"{'unmoved':>7s} {'unmoved pause':>18s} {'steady, before':>18s} {'moved':>5s} {'moved pause':>12s}"]
    for r in results:
        lines.append(
            f"{r.protocol:9s} {r.members:>6d}+1 {r.partitions:>5d} {f(r.assigned_s):>8s} {f(r.stable_s):>7s} "
            f"{f(r.joiner_first_record_s):>10s} {r.unmoved:>7d} "
            f"{f(r.unmoved_pause_median_s):>6s}/{f(r.unmoved_pause_p99_s)}/{f(r.unmoved_pause_max_s)} "
            f"{f(r.steady_gap_median_s):>6s}/{f(r.steady_gap_p99_s)}/{f(r.steady_gap_max_s)} "
            f"{r.moved:>5d} {f(r.moved_pause_median_s):>5s}/{f(r.moved_pause_max_s)}")
    by = {p: [r for r in results if r.protocol == p] for p in PROTOCOLS}
    if by["classic"] and by["consumer"]:
        def ratio(attr: str) -> str:
            med = {p: statistics.median(getattr(r, attr) for r in rs) for p, rs in by.items()}
            return f"{med['consumer'] / med['classic']:.2f}x" if med["classic"] else "-"

        lines.append(f"consumer / classic (medians of the runs): assigned {ratio('assigned_s')}, stable "
                     f"{ratio('stable_s')}, longest unmoved pause {ratio('unmoved_pause_max_s')}, "
                     f"steady longest gap {ratio('steady_gap_max_s')}")
    return lines
