"""FindCoordinator (10): the broker coordinating a group (key type 0), a transactional id (1) or a
share partition's state (2, v6+: the key is "group:topicId:partition", asked by brokers only).

On one broker that is itself; in a cluster, the leader of the key's partition of __consumer_offsets,
__transaction_state or __share_group_state. v0-3 ask for one key, v4+ for a batch. Like Kafka,
looking up a coordinator is when its internal topic gets created.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.coordinator.group_runtime import GroupCoordinatorRuntime, coordinator_of
from strom.coordinator.share_runtime import ShareCoordinatorRuntime
from strom.coordinator.txn_runtime import TransactionCoordinatorRuntime
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker
    from strom.cluster.zk_layout import BrokerRegistration

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION, SHARE = 0, 1, 2
_TOPICS = {GROUP: "__consumer_offsets", TRANSACTION: "__transaction_state", SHARE: "__share_group_state"}
log = logging.getLogger("strom.coordinator")


def _runtime(broker: Broker, key_type: int
             ) -> GroupCoordinatorRuntime | TransactionCoordinatorRuntime | ShareCoordinatorRuntime | None:
    if key_type == GROUP:
        return coordinator_of(broker)
    coord = broker.share_coordinator if key_type == SHARE else getattr(broker, "txn_coordinator", None)
    return coord if coord is not None and coord.loaded else None


def _lookup(broker: Broker, key_type: int, version: int) -> tuple[E, str | None]:
    """Whether the coordinator is available at all (and its internal topic exists)."""
    if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == SHARE and version < 6):
        return E.invalid_request, f"unsupported coordinator key type {key_type}"
    coord = _runtime(broker, key_type)
    if coord is None:
        return E.coordinator_not_available, "the coordinator is loading"
    try:
        ready = coord.find_coordinator()
    except Exception as e:  # the internal topic could not be created
        log.error("cannot create the coordinator's topic: %s", e)
        return E.coordinator_not_available, str(e)
    if not ready:
        return E.coordinator_not_available, "the coordinator's topic is being created"
    return E.none, None


def _entry(broker: Broker, error: E, message: str | None, key: str, key_type: int,
           listener: str) -> dict[str, Any]:
    """The coordinator as a client on ``listener`` reaches it (that listener's endpoint)."""
    node = broker.node_for(listener)
    node_id, host, port = node.broker_id, node.host, node.port
    if error is E.none and broker.cluster is not None:
        error, message, reg = _coordinator_in_cluster(broker, key, key_type)
        if reg is not None:
            node_id, (host, port) = reg.broker_id, reg.address_for(listener)
    if error is not E.none:
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}
    return {"error_code": E.none, "error_message": None, "node_id": node_id, "host": host, "port": port}


def _coordinator_in_cluster(broker: Broker, key: str,
                            key_type: int) -> tuple[E, str | None, BrokerRegistration | None]:
    """The leader of the key's partition of the coordinator's topic, as ZooKeeper has it."""
    assert broker.cluster is not None
    coord = _runtime(broker, key_type)
    if coord is None:
        return E.coordinator_not_available, "the coordinator is loading", None
    topic = _TOPICS[key_type]
    store = broker.cluster.store
    state = store.state(topic, coord.partition_for(key))
    reg = store.brokers.get(state.leader) if state is not None else None
    if reg is None:
        return E.coordinator_not_available, f"the key's {topic} partition has no leader", None
    return E.none, None, reg


def _authorized_entry(broker: Broker, ctx: RequestContext, error: E, message: str | None, key: str,
                      key_type: int) -> dict[str, Any]:
    """DESCRIBE on the group (or transactional id) is needed to learn its coordinator; a share
    state's coordinator is for brokers (CLUSTER_ACTION), as in Kafka."""
    if key_type == SHARE and not broker.acls.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION):
        return {"error_code": E.cluster_authorization_failed, "error_message": None, "node_id": -1, "host": "",
                "port": -1}
    if key_type == SHARE and not _share_key_valid(key):
        return {"error_code": E.invalid_request, "error_message": f"invalid share coordinator key {key!r}",
                "node_id": -1, "host": "", "port": -1}
    if key_type in _KEY_RESOURCES:
        resource, refusal = _KEY_RESOURCES[key_type]
        if not broker.acls.allowed(ctx, AclOperation.DESCRIBE, resource, key):
            return {"error_code": refusal, "error_message": None, "node_id": -1, "host": "", "port": -1}
    return _entry(broker, error, message, key, key_type, ctx.listener)


def _share_key_valid(key: str) -> bool:
    """"group:topicId:partition" (the group id may hold colons itself)."""
    parts = key.rsplit(":", 2)
    return len(parts) == 3 and bool(parts[0]) and bool(parts[1]) and parts[2].isdigit()


_KEY_RESOURCES = {GROUP: (ResourceType.GROUP, E.group_authorization_failed),
                  TRANSACTION: (ResourceType.TRANSACTIONAL_ID, E.transactional_id_authorization_failed)}


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    key_type = getattr(request, "key_type", GROUP)
    error, message = _lookup(broker, key_type, ctx.api_version)
    if ctx.api_version >= 4:
        return {"throttle_time": 0,
                "coordinators": [{"key": k, **_authorized_entry(broker, ctx, error, message, k, key_type)}
                                 for k in request.coordinator_keys]}
    return {"throttle_time": 0, **_authorized_entry(broker, ctx, error, message, request.key, key_type)}
