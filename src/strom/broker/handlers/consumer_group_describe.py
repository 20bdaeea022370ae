"""ConsumerGroupDescribe (69): a consumer-protocol group (KIP-848) with its group epoch, assignment
epoch, assignor and members (member epochs, subscriptions, current and target assignments).
GROUP_ID_NOT_FOUND for an unknown group or a classic one (DescribeGroups describes those)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.handlers.group_describe import describe_each, failed, topic_partitions
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # member_type (v1): which protocol the member speaks


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if "consumer" not in broker.config.group_coordinator_rebalance_protocols:
        # Not offered (group.coordinator.rebalance.protocols): each group answers UNSUPPORTED_VERSION.
        return {"throttle_time": 0, "groups": [failed(g, E.unsupported_version) for g in request.group_ids]}
    metadata = broker.metadata

    def topics_of(d: Any) -> set[str]:
        names = {n for m in d.members for n in m.subscribed_topic_names}
        return names | {info.name for m in d.members for t in (*m.assignment, *m.target_assignment)
                        if (info := metadata.topic_by_id(t)) is not None}

    def entry(d: Any) -> dict[str, Any]:
        return {
            "group_state": d.state, "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "assignor_name": d.assignor_name,
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": topic_partitions(broker, m.assignment),
                "target_assignment": topic_partitions(broker, m.target_assignment),
                "member_type": CLASSIC_MEMBER if m.uses_classic_protocol else CONSUMER_MEMBER,
            } for m in d.members]}

    groups = describe_each(broker, ctx, request, lambda coord, g: coord.describe_consumer_group(g), topics_of, entry)
    return {"throttle_time": 0, "groups": groups}
