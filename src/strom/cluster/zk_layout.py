"""Kafka's ZooKeeper layout: the znode paths and the JSON each one holds (sans-IO).

The same paths and documents as Kafka's ZooKeeper mode (kafka.zk.ZkData), so the tree reads the same
to anyone who knows Kafka's:

  /cluster/id                                       {"version":"1","id":<cluster id>}
  /controller                        (ephemeral)    {"version":1,"brokerid":N,"timestamp":"..."}
  /controller_epoch                                 "<epoch>"
  /brokers/ids/<id>                  (ephemeral)    endpoints, rack, listener protocol map (and strom's
                                                    schema_registry_endpoints)
  /brokers/topics/<topic>                           {"version":3,"topic_id":..,"partitions":{"0":[1,2]},..}
  /brokers/topics/<topic>/partitions/<p>/state      {"controller_epoch":..,"leader":..,"leader_epoch":..,"isr":[..]}
  /config/topics/<topic>, /config/brokers/<id>|<default>   {"version":1,"config":{..}}
  /admin/delete_topics/<topic>                      a deletion request for the controller
  /latest_producer_id_block                         {"version":1,"broker":N,"block_start":"..","block_end":".."}
  /strom/controlled_shutdown/<id>    (ephemeral)    a broker handing its leaderships away before it stops
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from strom.clock import now_ms

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"  # SCRAM credentials (and, in Kafka, user quotas) per user
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# strom's own: a broker in a controlled shutdown (SIGTERM) says so here (ephemeral), and the
# controller moves its leaderships away (Kafka sent a ControlledShutdown request instead).
CONTROLLED_SHUTDOWN = "/strom/controlled_shutdown"
DEFAULT_BROKER_CONFIG = "<default>"  # Kafka's name for the cluster-wide broker config resource

# The paths every cluster needs before anything else happens (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers", CONFIG_USERS,
                    "/config/changes", "/admin/delete_topics", "/cluster", CONTROLLED_SHUTDOWN)

NO_LEADER = -1
PRODUCER_ID_BLOCK_SIZE = 1000


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def assumed_children(path: str) -> list[str] | None:
    """The children a node of a topic's tree has in Kafka's layout without reading them: a
    partition node holds its state, a state node nothing (None: read them)."""
    parts = path.split("/")
    # "", "brokers", "topics", <topic>, "partitions", <p>[, "state"]
    if len(parts) == 6 and path.startswith(TOPICS + "/") and parts[4] == "partitions" and parts[5].isdigit():
        return ["state"]
    if len(parts) == 7 and path.startswith(TOPICS + "/") and parts[4] == "partitions" and parts[6] == "state":
        return []
    return None


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def group_config_path(group_id: str) -> str:
    """A GROUP resource's configs (share groups' share.auto.offset.reset, ...)."""
    return f"/config/groups/{group_id}"


def broker_config_path(resource_name: str) -> str:
    """"" (the cluster-wide defaults) is Kafka's <default> node."""
    return f"{CONFIG_BROKERS}/{resource_name or DEFAULT_BROKER_CONFIG}"


def sanitize(name: str) -> str:
    """An entity name (user, client id) as a znode name, URL-encoded as Kafka's Sanitizer does;
    <default> stays as it is."""
    return name if name == DEFAULT_BROKER_CONFIG else urllib.parse.quote(name, safe="")


def desanitize(name: str) -> str:
    return name if name == DEFAULT_BROKER_CONFIG else urllib.parse.unquote(name)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"


def encode_config_change(entity_path: str) -> bytes:
    """Kafka's change notification (/config/changes/config_change_<seq>): which entity changed."""
    return _dump({"version": 2, "entity_path": entity_path})


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(data: bytes) -> Any:
    return json.loads(data.decode())


def now_text() -> str:
    return str(now_ms())


# ---- /cluster/id ----------------------------------------------------------------------------

def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


# ---- /controller, /controller_epoch --------------------------------------------------------

def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": now_text()})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_epoch(data: bytes) -> int:
    return int(data.decode())


# ---- /brokers/ids/<id> ---------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str  # of the inter-broker listener (clients are told the endpoint of their own listener)
    port: int
    rack: str | None
    endpoints: tuple[str, ...]  # NAME://host:port
    protocol_map: dict[str, str]
    epoch: int = -1  # the registration znode's czxid: a new value means the broker restarted
    # The broker's schema registry listeners (http(s)://host:port), strom's own field: where another
    # broker forwards a registry write when this one leads _schemas (Kafka's readers ignore it).
    schema_registry: tuple[str, ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        for ep in self.endpoints:
            name, _, address = ep.partition("://")
            if name == listener:
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None

    def address_for(self, listener: str) -> tuple[str, int]:
        """Where a client on ``listener`` reaches this broker: that listener's endpoint, or the
        inter-broker one when the broker has no such listener."""
        return self.endpoint(listener) or (self.host, self.port)


def encode_broker(reg: BrokerRegistration) -> bytes:
    return _dump({
        "features": {},
        "listener_security_protocol_map": reg.protocol_map,
        "endpoints": list(reg.endpoints),
        "rack": reg.rack,
        "jmx_port": -1,
        "host": reg.host,
        "port": reg.port,
        "timestamp": now_text(),
        "version": 5,
        **({"schema_registry_endpoints": list(reg.schema_registry)} if reg.schema_registry else {}),
    })


def decode_broker(broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
    doc = _load(data)
    return BrokerRegistration(broker_id, doc.get("host") or "", int(doc.get("port", -1)), doc.get("rack"),
                              tuple(doc.get("endpoints", ())), dict(doc.get("listener_security_protocol_map", {})),
                              epoch, tuple(doc.get("schema_registry_endpoints", ())))


# ---- /brokers/topics/<topic> ---------------------------------------------------------------

def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def uuid_from_kafka(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@dataclass(frozen=True)
class TopicAssignment:
    name: str
    topic_id: uuid.UUID
    replicas: dict[int, list[int]]  # partition -> replica broker ids, the preferred leader first
    adding: dict[int, list[int]]
    removing: dict[int, list[int]]


def encode_topic(t: TopicAssignment) -> bytes:
    return _dump({
        "version": 3,
        "topic_id": uuid_to_kafka(t.topic_id),
        "partitions": {str(p): r for p, r in sorted(t.replicas.items())},
        "adding_replicas": {str(p): r for p, r in sorted(t.adding.items())},
        "removing_replicas": {str(p): r for p, r in sorted(t.removing.items())},
    })


def decode_topic(name: str, data: bytes) -> TopicAssignment:
    doc = _load(data)

    def parts(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (doc.get(key) or {}).items()}

    return TopicAssignment(name, uuid_from_kafka(doc["topic_id"]), parts("partitions"), parts("adding_replicas"),
                           parts("removing_replicas"))


# ---- /brokers/topics/<topic>/partitions/<p>/state ------------------------------------------

@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1  # the state znode's version: every update is a compare-and-set on it


def encode_state(s: PartitionState) -> bytes:
    return _dump({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                  "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def decode_state(data: bytes, zk_version: int) -> PartitionState:
    doc = _load(data)
    return PartitionState(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]),
                          int(doc["controller_epoch"]), zk_version)


# ---- /config/... ---------------------------------------------------------------------------

def encode_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": configs})


def decode_config(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    return {str(k): str(v) for k, v in (_load(data).get("config") or {}).items()}


# ---- /latest_producer_id_block -------------------------------------------------------------

def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block_end(data: bytes) -> int:
    """The last id of the newest block; -1 before the first."""
    if not data:
        return -1
    return int(_load(data)["block_end"])
