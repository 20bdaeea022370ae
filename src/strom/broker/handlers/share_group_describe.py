"""ShareGroupDescribe (77): a share group with its epochs and members (their subscriptions and
partitions). GROUP_ID_NOT_FOUND for an unknown group or one of another type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.group_describe import describe_each, topic_partitions

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1

ASSIGNOR = "simple"  # Kafka's SimpleAssignor, the share groups' only one


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    metadata = broker.metadata

    def topics_of(d: Any) -> set[str]:
        names = {n for m in d.members for n in m.subscribed_topic_names}
        return names | {info.name for m in d.members for t in m.assignment
                        if (info := metadata.topic_by_id(t)) is not None}

    def entry(d: Any) -> dict[str, Any]:
        return {
            "group_state": d.state, "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "assignor_name": ASSIGNOR,
            "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "assignment": topic_partitions(broker, m.assignment)} for m in d.members]}

    groups = describe_each(broker, ctx, request, lambda coord, g: coord.describe_share_group(g), topics_of, entry)
    return {"throttle_time": 0, "groups": groups}
