"""Replica placement for new topics and partitions (Kafka's AdminUtils.assignReplicasToBrokers).

Leaders are spread round-robin over the brokers from a random start, and each partition's followers
follow its leader at a shift that grows every time the partitions wrap around the brokers, so the
replicas of consecutive partitions do not pile up on the same brokers. With racks, the broker list
alternates racks and a partition takes a broker from a rack it already uses only when every rack is
used (and a broker twice never).
"""

from __future__ import annotations

import random
from collections.abc import Mapping


class AssignmentError(ValueError):
    pass


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    first_partition: int = 0, rng: random.Random | None = None) -> dict[int, list[int]]:
    """partition -> replica list (preferred leader first) for ``partitions`` partitions numbered
    from ``first_partition``. ``brokers``: live broker id -> rack (None when unset)."""
    if replication_factor <= 0:
        raise AssignmentError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    racks = {r for r in brokers.values()}
    if None in racks and len(racks) > 1:
        raise AssignmentError("Not all brokers have rack information for replica rack aware assignment.")
    ids = _rack_alternated(brokers) if None not in racks else sorted(brokers)
    n = len(ids)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for i in range(partitions):
        p = first_partition + i
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        if None in racks:
            out[p] = [ids[first]] + [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            out[p] = _rack_aware(brokers, ids, first, shift, replication_factor)
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n if n > 1 else first


def _rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so that consecutive ones sit in different racks: r1b1, r2b1, r3b1, r1b2, ..."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(str(brokers[b]), []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _rack_aware(brokers: Mapping[int, str | None], ids: list[int], first: int, shift: int, rf: int) -> list[int]:
    n = len(ids)
    leader = ids[first]
    replicas = [leader]
    used_racks = {brokers[leader]}
    all_racks = set(brokers.values())
    k = 0
    while len(replicas) < rf:
        candidate = ids[_replica_index(first, shift, k, n)]
        k += 1
        rack = brokers[candidate]
        if candidate in replicas:
            if k > 2 * n:  # every broker tried: nothing left to pick
                break
            continue
        if rack in used_racks and len(used_racks) < len(all_racks) and k <= n:
            continue  # a rack not used yet comes first
        replicas.append(candidate)
        used_racks.add(rack)
    return replicas
