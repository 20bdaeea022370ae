"""DescribeShareGroupOffsets (90): each share partition's start offset, leader epoch and lag, as
the share coordinator of its key holds its state, wherever that is (ReadShareGroupStateSummary
through the persister; KIP-932, Kafka's describeShareGroupOffsets).

- DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for that group); a topic the principal
  may not DESCRIBE gets TOPIC_AUTHORIZATION_FAILED on each of its partitions, or, when every topic
  was asked for (topics null), is left out.
- A topic that does not exist, or a share partition without state, is absence of data, not an
  error: start offset -1 and lag -1 (as OffsetFetch answers -1).
- lag = the partition's end offset (its leader's high watermark, ListOffsets) - start offset -
  records after the start already ACKNOWLEDGED or ARCHIVED (Kafka's deliveryCompleteCount); a
  leader that cannot be asked is the partition's error.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.handlers.share_offsets import share_partition_offset
from strom.coordinator.group_runtime import coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1

ZERO_UUID = uuid.UUID(int=0)


def _group_error(group_id: str, error: E, message: str | None = None) -> dict[str, Any]:
    return {"group_id": group_id, "topics": [], "error_code": error, "error_message": message}


def _absent(partition: int, error: E = E.none) -> dict[str, Any]:
    return {"partition_index": partition, "start_offset": -1, "leader_epoch": 0, "lag": -1, "error_code": error,
            "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": list(await asyncio.gather(*(_group(broker, ctx, g) for g in request.groups)))}


async def _group(broker: Broker, ctx: RequestContext, g: Any) -> dict[str, Any]:
    acls = broker.acls
    group_id = g.group_id
    if not acls.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return _group_error(group_id, E.group_authorization_failed)
    coord, error = coordinator_for(broker, group_id)
    if coord is None:
        return _group_error(group_id, error)
    metadata = broker.metadata
    wanted: list[tuple[str, list[int]]]
    if g.topics is None:
        # Every share partition the group has state for; those of topics it may not see left out.
        wanted = []
        initialized = coord.share_initialized(group_id) or {}
        for topic_id in sorted(initialized, key=str):
            info = metadata.topic_by_id(topic_id)
            if info is not None:
                wanted.append((info.name, sorted(initialized[topic_id])))
        denied = set(acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ in wanted])) \
            if acls.enabled else set()
        wanted = [(n, ps) for n, ps in wanted if n not in denied]
    else:
        wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        denied = set(acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ in wanted])) \
            if acls.enabled else set()
    topics = []
    for name, parts in wanted:
        info = metadata.get_topic(name)
        if name in denied:
            topics.append({"topic_name": name, "topic_id": ZERO_UUID,
                           "partitions": [_absent(p, E.topic_authorization_failed) for p in parts]})
        elif info is None:
            topics.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [_absent(p) for p in parts]})
        else:
            topics.append({"topic_name": name, "topic_id": info.topic_id, "partitions": list(await asyncio.gather(*(
                _partition(broker, group_id, info.topic_id, name, p) for p in parts)))})
    return {"group_id": group_id, "topics": topics, "error_code": E.none, "error_message": None}


async def _partition(broker: Broker, group_id: str, topic_id: uuid.UUID, topic: str,
                     partition: int) -> dict[str, Any]:
    found = await share_partition_offset(broker, group_id, topic_id, topic, partition)
    return {"partition_index": partition, "start_offset": found.start_offset, "leader_epoch": found.leader_epoch,
            "lag": found.lag, "error_code": found.error, "error_message": None}
