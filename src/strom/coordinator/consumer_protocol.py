"""The little the broker reads of the client-side "consumer" protocol: the subscribed topics.

A member's JoinGroup metadata for protocol type "consumer" is a ConsumerProtocolSubscription:
int16 version, then (in every version) an array of topic names. Everything after it (user data,
owned partitions, generation, rack) is the assignors' business. The coordinator needs the topics
for OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC) and for offset expiry of stable groups.
"""

from __future__ import annotations

import struct

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
