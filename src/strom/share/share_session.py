"""Share sessions (KIP-932's answer to KIP-227): which partitions one member of a share group fetches
through one broker, and the epoch that orders its requests (Kafka's ShareSession and ShareSessionCache).

- ShareFetch at epoch 0 opens a session (replacing the member's old one) with the partitions it
  names; it may carry no acknowledgements (INVALID_REQUEST).
- Then each request carries the session's epoch (INVALID_SHARE_SESSION_EPOCH otherwise;
  SHARE_SESSION_NOT_FOUND without a session), adds the partitions it names, drops the forgotten
  ones, and moves the epoch on by one (after INT32_MAX comes 1).
- Epoch -1 closes the session once its acknowledgements are applied; ShareAcknowledge can never
  open one (epoch 0 is INVALID_SHARE_SESSION_EPOCH).
Closing a session, or losing its connection, releases what its member holds (the manager does it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode as E

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

SessionKey = tuple[str, str]  # (group id, member id)
SharePartitionKey = tuple[uuid.UUID, int]  # (topic id, partition)


class ShareSessionError(Exception):
    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)  # ordered set


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class ShareSessionCache:
    """Sessions by (group, member), at most ``max_sessions`` (group.share.max.share.sessions)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection_id: int,
             partitions: Iterable[SharePartitionKey]) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session (and the one it replaces, if any)."""
        old = self.sessions.pop((group_id, member_id), None)
        if len(self.sessions) >= self.max_sessions:
            raise ShareSessionError(E.share_session_limit_reached,
                                    f"the broker holds group.share.max.share.sessions={self.max_sessions} sessions")
        session = ShareSession(group_id, member_id, connection_id, partitions=dict.fromkeys(partitions))
        self.sessions[(group_id, member_id)] = session
        return session, old

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """A request at ``epoch`` (> 0 or -1) for the member's session: the session, or the error."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(E.share_session_not_found,
                                    f"no share session for member {member_id} of group {group_id}")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise ShareSessionError(E.invalid_share_session_epoch,
                                    f"share session epoch {epoch}, expected {session.epoch}")
        return session

    def advance(self, session: ShareSession, add: Iterable[SharePartitionKey],
                forget: Iterable[SharePartitionKey]) -> None:
        for key in add:
            session.partitions[key] = None
        for key in forget:
            session.partitions.pop(key, None)
        session.epoch = next_epoch(session.epoch)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def close_connection(self, connection_id: int) -> list[ShareSession]:
        """The sessions opened on a connection that closed."""
        gone = [k for k, s in self.sessions.items() if s.connection_id == connection_id]
        return [self.sessions.pop(k) for k in gone]

    def has_group(self, group_id: str) -> bool:
        """Some member of the group has a session here."""
        return any(k[0] == group_id for k in self.sessions)

    def close_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)
