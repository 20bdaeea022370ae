"""Drive the pure GroupCoordinatorShard the way the runtime does, with a hand-moved clock."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from strom.coordinator.api import (
    JoinGroupRequestData,
    JoinGroupResult,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequestData,
    SyncGroupRequestData,
    SyncGroupResult,
)
from strom.coordinator.config import GroupConfig
from strom.coordinator.consumer_group import TopicImage
from strom.coordinator.result import CoordinatorResult, Record
from strom.coordinator.shard import GroupCoordinatorShard
from strom.protocol.errors import ErrorCode as E


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class Token:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


class Harness:
    def __init__(self, topics: Mapping[str, TopicImage] | None = None, **config: Any) -> None:
        images = dict(topics or {})
        self.shard = GroupCoordinatorShard(GroupConfig(**{"initial_rebalance_delay_ms": 0, **config}),
                                           lambda: images)
        self.now = 1_000_000
        self.replies: dict[Token, Any] = {}
        self.records: list[Record] = []
        self.fail_next_append = False
        self._n = 0

    def apply(self, res: CoordinatorResult) -> None:
        if res.records and self.fail_next_append:
            self.fail_next_append = False
            assert res.on_failure is not None
            res = res.on_failure(self.now, E.coordinator_not_available)
        else:
            for r in res.records:
                self.records.append(r)
                if r.replay:
                    self.shard.replay(r.key, r.value, self.now)
        for token, value in res.replies:
            assert token not in self.replies, f"{token} answered twice"
            self.replies[token] = value

    def token(self, name: str) -> Token:
        self._n += 1
        return Token(f"{name}#{self._n}")

    def answer(self, token: Token) -> Any:
        return self.replies.get(token)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.shard.tick(self.now))

    # --- requests ---

    def join(self, member_id: str = "", group: str = "g", topics: tuple[str, ...] = ("t",),
             protocols: list[tuple[str, bytes]] | None = None, instance: str | None = None,
             require_known: bool = False, session: int = 10_000, rebalance: int = 30_000,
             client_id: str = "c", protocol_type: str = "consumer") -> Token:
        tok = self.token("join")
        req = JoinGroupRequestData(group, member_id, instance, client_id, "/127.0.0.1", session, rebalance,
                                   protocol_type, protocols or [("range", subscription(*topics))], require_known)
        self.apply(self.shard.join_group(self.now, tok, req))
        return tok

    def join_result(self, tok: Token) -> JoinGroupResult:
        r = self.answer(tok)
        assert isinstance(r, JoinGroupResult), f"no JoinGroup answer for {tok}: {r!r}"
        return r

    def two_joined(self, **join: Any) -> tuple[str, str]:
        """Two members join (with ``join``'s settings) and the join phase ends: (leader, the other)."""
        toks = [self.join(**join) for _ in range(2)]
        self.advance(0)
        leader = self.join_result(toks[0]).leader
        other = next(self.join_result(t).member_id for t in toks if self.join_result(t).member_id != leader)
        return leader, other

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = "g", instance: str | None = None) -> Token:
        tok = self.token("sync")
        req = SyncGroupRequestData(group, generation, member_id, instance, None, None, assignments or {})
        self.apply(self.shard.sync_group(self.now, tok, req))
        return tok

    def sync_result(self, tok: Token) -> SyncGroupResult:
        r = self.answer(tok)
        assert isinstance(r, SyncGroupResult), f"no SyncGroup answer for {tok}: {r!r}"
        return r

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance: str | None = None) -> E:
        return self.shard.heartbeat(self.now, group, member_id, instance, generation)

    def leave(self, *member_ids: str, group: str = "g", instance: str | None = None) -> Any:
        tok = self.token("leave")
        self.apply(self.shard.leave_group(self.now, tok, group, [MemberIdentity(m, instance) for m in member_ids]))
        return self.answer(tok)

    def commit(self, offsets: dict[tuple[str, int], int], member_id: str = "", generation: int = -1,
               group: str = "g", metadata: str = "", instance: str | None = None) -> dict[tuple[str, int], E]:
        tok = self.token("commit")
        parts = [OffsetCommitPartition(t, p, o, 5, metadata) for (t, p), o in offsets.items()]
        self.apply(self.shard.commit_offsets(self.now, tok,
                                             OffsetCommitRequestData(group, member_id, instance, generation, parts)))
        return {(r.topic, r.partition): r.error for r in self.answer(tok)}

    def committed(self, group: str = "g", partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        return {(f.topic, f.partition): f.offset for f in self.shard.fetch_offsets(group, partitions)}

    def state(self, group: str = "g") -> str:
        return self.shard.describe_group(group).state

    # --- whole flows ---

    def form_group(self, n: int, group: str = "g", **kw: Any) -> list[str]:
        """n dynamic members join together and sync; returns member ids, leader first."""
        toks = [self.join(group=group, client_id=f"c{i}", **kw) for i in range(n)]
        self.advance(0)
        results = [self.join_result(t) for t in toks]
        assert all(r.error is E.none for r in results), results
        leader = results[0].leader
        ids = [leader] + [r.member_id for r in results if r.member_id != leader]
        gen = results[0].generation_id
        assignment = {mid: f"assignment-{mid}".encode() for mid in ids}
        syncs = [self.sync(mid, gen, assignment if mid == leader else None, group=group) for mid in ids[1:]]
        syncs.insert(0, self.sync(leader, gen, assignment, group=group))
        for t in syncs:
            assert self.sync_result(t).error is E.none
        assert self.state(group) == "Stable"
        return ids

    def generation(self, group: str = "g") -> int:
        return self.shard.groups[group].generation_id
