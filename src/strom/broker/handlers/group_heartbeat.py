"""What ConsumerGroupHeartbeat (68) and ShareGroupHeartbeat (76) share: the checks before the group's
coordinator sees the heartbeat (READ on the group, DESCRIBE on each subscribed topic, this broker
coordinating the group), the broker's topics as the group sees them, and an error answer (the two
responses have the same fields). Not a handler itself (no API_KEY)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from strom.coordinator.consumer_group import TopicImage
from strom.coordinator.group_runtime import GroupCoordinatorRuntime, coordinator_for
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.cluster.metadata import TopicInfo


class MetadataTopics(Mapping[str, TopicImage]):
    """The broker's topics as the group sees them (id and partition count), read at each heartbeat."""

    def __init__(self, topics: Mapping[str, TopicInfo]) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> TopicImage:
        info = self._topics[name]
        return TopicImage(info.topic_id, info.partitions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)


def failed(error: E, message: str | None = None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


def heartbeat_coordinator(broker: Broker, ctx: RequestContext, group_id: str,
                          subscribed: Sequence[str] | None) -> GroupCoordinatorRuntime | E:
    """The coordinator of ``group_id`` if the member may heartbeat to it here, else the error for
    the answer: READ on the group, DESCRIBE on every topic in ``subscribed``, then the coordinator."""
    acls = broker.acls
    if not acls.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return E.group_authorization_failed
    if subscribed and acls.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, subscribed):
        # Kafka: a member may subscribe only to topics it may describe.
        return E.topic_authorization_failed
    coord, error = coordinator_for(broker, group_id)
    return error if coord is None else coord
