"""The little the broker reads of the client-side "consumer" protocol: the subscribed topics.

A member's JoinGroup metadata for protocol type "consumer" is a ConsumerProtocolSubscription:
int16 version, then (in every version) an array of topic names. Everything after it (user data,
owned partitions, generation, rack) is the assignors' business. The coordinator needs the topics
for OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC) and for offset expiry of stable groups.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PROTOCOL_TYPE = "consumer"


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription, or None when the bytes cannot be read."""
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0:
            return None
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos = 6
        topics = set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------- the whole subscription and assignment
# Online migration between the classic and the consumer protocol (coordinator/migration.py) reads a
# classic member's subscription (topics, owned partitions, rack) and assignment, and writes the
# assignments the consumer group computes for its classic members. Kafka's ConsumerProtocol schemas:
# Subscription v0 topics, user data; v1 + owned partitions; v2 + generation; v3 + rack id.
# Assignment v0-v3: partitions by topic, user data.

ASSIGNMENT_MAX_VERSION = 3
TopicPartitions = dict[str, frozenset[int]]


class ConsumerProtocolError(ValueError):
    """Bytes that are not a ConsumerProtocolSubscription or ConsumerProtocolAssignment."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error:
            raise ConsumerProtocolError("truncated") from None
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.unpack(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ConsumerProtocolError("truncated string")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ConsumerProtocolError("string is not UTF-8") from None

    def count(self) -> int:
        n = self.unpack(">i")
        if n < 0 or n > len(self.data):
            raise ConsumerProtocolError(f"array of {n}")
        return n

    def skip_bytes(self) -> None:
        n = self.unpack(">i")
        if n > 0:
            self.pos += n

    def topic_partitions(self) -> TopicPartitions:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            parts = frozenset(self.unpack(">i") for _ in range(self.count()))
            out[topic] = out.get(topic, frozenset()) | parts
        return out

    @property
    def more(self) -> bool:
        return self.pos < len(self.data)


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: TopicPartitions = field(default_factory=dict)
    rack_id: str | None = None


def decode_subscription(metadata: bytes) -> Subscription:
    """A JoinGroup member's metadata for protocol type "consumer"; raises ConsumerProtocolError.
    Later versions than 3 are read as 3 (Kafka's schemas only ever add fields at the end)."""
    r = _Reader(metadata)
    version = r.unpack(">h")
    if version < 0:
        raise ConsumerProtocolError(f"version {version}")
    topics = tuple(t or "" for t in (r.string() for _ in range(r.count())))
    r.skip_bytes()  # user data: the client-side assignors' business
    owned: TopicPartitions = {}
    rack = None
    if version >= 1 and r.more:
        owned = r.topic_partitions()
    if version >= 2 and r.more:
        r.unpack(">i")  # generation
    if version >= 3 and r.more:
        rack = r.string()
    return Subscription(version, topics, owned, rack)


def decode_assignment(data: bytes) -> TopicPartitions:
    """A classic member's assignment (SyncGroup's bytes); empty bytes are no partitions."""
    if not data:
        return {}
    r = _Reader(data)
    if r.unpack(">h") < 0:
        raise ConsumerProtocolError("negative version")
    return r.topic_partitions()


def encode_assignment(partitions: TopicPartitions, version: int) -> bytes:
    """A ConsumerProtocolAssignment without user data, in the member's own version (its
    subscription's, at most 3), as Kafka answers a classic member of a consumer group."""
    out = [struct.pack(">hi", min(max(version, 0), ASSIGNMENT_MAX_VERSION), len(partitions))]
    for topic in sorted(partitions):
        name = topic.encode()
        parts = sorted(partitions[topic])
        out.append(struct.pack(f">h{len(name)}si{len(parts)}i", len(name), name, len(parts), *parts))
    out.append(struct.pack(">i", -1))  # null user data
    return b"".join(out)
