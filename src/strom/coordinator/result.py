"""What a coordinator operation hands back to the runtime (Kafka's CoordinatorResult).

The state machine never does I/O. An operation returns the records to append to __consumer_offsets
and the answers for parked requests (identified by the tokens the runtime passed in). The runtime
appends the records, then replays those marked ``replay`` into the state machine (offset commits
take effect only once written), then delivers the replies. If the append fails it calls
``on_failure`` instead, which returns the replies (errors) to send and undoes what needs undoing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.coordinator.group import Token


@dataclass(frozen=True, slots=True)
class Record:
    group_id: str  # decides the __consumer_offsets partition
    key: bytes
    value: bytes | None  # None: tombstone
    replay: bool = False
    producer_id: int = -1  # a transactional offset commit: written in the producer's transaction
    producer_epoch: int = -1


@dataclass
class CoordinatorResult:
    records: list[Record] = field(default_factory=list)
    replies: list[tuple[Token, Any]] = field(default_factory=list)
    on_failure: Callable[[int, int], CoordinatorResult] | None = None  # (now_ms, error code) -> result

    def reply(self, token: Token | None, value: Any) -> None:
        if token is not None:
            self.replies.append((token, value))

    def merge(self, other: CoordinatorResult) -> CoordinatorResult:
        """Fold ``other`` (e.g. from a timer or a cascade) into this result."""
        self.records.extend(other.records)
        self.replies.extend(other.replies)
        if other.on_failure is not None:
            mine = self.on_failure
            theirs = other.on_failure
            if mine is None:
                self.on_failure = theirs
            else:
                def both(now_ms: int, error: int) -> CoordinatorResult:
                    return mine(now_ms, error).merge(theirs(now_ms, error))
                self.on_failure = both
        return self
