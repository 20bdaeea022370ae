"""The fetcher's side of a fetch session (KIP-227; Kafka's FetchSessionHandler): which partitions a
follower's next Fetch must name, and which it may leave out.

The first Fetch is full (epoch 0) and asks the leader for a session; once the leader answers with
a session id, each Fetch names only the partitions that are new or whose fetch position (offset,
log start offset, leader epoch, byte limit) changed since the last one sent, and lists as forgotten
those no longer fetched. The leader then answers only for partitions that have something to say.
Any session error (FETCH_SESSION_ID_NOT_FOUND after the leader restarted or evicted it,
INVALID_FETCH_SESSION_EPOCH) or a lost connection starts over with a full Fetch, which also closes
the old session on the leader.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode as E

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0

# What the leader caches of a partition: (fetch offset, log start offset, leader epoch, max bytes).
Position = tuple[int, int, int, int]
Key = tuple[str, int]


class FetchSessionClient:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[Key, Position] = {}  # what the leader's session holds, as last sent
        self._pending: dict[Key, Position] | None = None  # what the Fetch on the wire will make it hold

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict[Key, Position]) -> tuple[int, int, list[Key], list[Key]]:
        """(session id, epoch, partitions to name, partitions to forget) of the next Fetch of
        ``wanted`` (every partition to fetch now, with its position)."""
        self._pending = dict(wanted)
        if self.full:
            return self.session_id, self.epoch, list(wanted), []
        sent = self._sent
        named = [k for k, pos in wanted.items() if sent.get(k) != pos]
        forgotten = [k for k in sent if k not in wanted]
        return self.session_id, self.epoch, named, forgotten

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """After the answer to the Fetch ``build`` made; False when it was a session error (the
        partitions were not served, and the next Fetch is a full one)."""
        pending, self._pending = self._pending, None
        if error_code != E.none:
            self.reset(keep_id=error_code != E.fetch_session_id_not_found)
            return False
        if self.full:
            if session_id != INVALID_SESSION_ID:
                self.session_id, self.epoch = session_id, 1
                self._sent = pending or {}
            else:
                self.session_id = INVALID_SESSION_ID  # no room on the leader: full fetches go on
        else:
            self.epoch = 1 if self.epoch == 0x7FFFFFFF else self.epoch + 1
            self._sent = pending or {}
        return True

    def reset(self, keep_id: bool = True) -> None:
        """Start over with a full Fetch; with ``keep_id`` it names the old session, closing it."""
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = None
