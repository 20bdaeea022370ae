"""ACLs and client quotas in a cluster: kept in ZooKeeper in Kafka's layout, changed through any
broker, and in force on every broker (each reloads on the change notification).

Every client here is User:ANONYMOUS (PLAINTEXT), the brokers' own traffic too; the cluster runs
with allow.everyone.if.no.acl.found=true so that only the resources the tests name are guarded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clusterproc import Cluster
from conftest import unique
from helpers import RawConnection, wait_until
from test_cli_configs import ok

pytestmark = pytest.mark.timeout(180)

CLUSTER_OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                     "allow.everyone.if.no.acl.found": "true"}


def _deny_describe(topic: str, as_filter: bool = False) -> Any:
    from confluent_kafka import admin as ck

    return (ck.AclBindingFilter if as_filter else ck.AclBinding)(ck.ResourceType.TOPIC, topic, ck.ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                         ck.AclOperation.DESCRIBE, ck.AclPermissionType.DENY)


def test_an_acl_made_through_one_broker_holds_on_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    hidden, seen = unique("hidden"), unique("seen")
    first = cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    for t in (hidden, seen):
        admin.create_topics([NewTopic(t, 1, 3)])[t].result(30)
    for f in admin.create_acls([_deny_describe(hidden)]).values():
        f.result(20)
    # Kafka's layout in ZooKeeper.
    data = json.loads(cluster.zk.get(f"/kafka-acl/Topic/{hidden}")[0])
    assert data == {"version": 1, "acls": [{"principal": "User:ANONYMOUS", "permissionType": "Deny",
                                            "operation": "Describe", "host": "*"}]}
    assert cluster.zk.get_children("/kafka-acl-changes")

    def hidden_everywhere() -> bool:
        for b in cluster.brokers.values():
            with RawConnection(b.bootstrap) as conn:
                listed = {t.name for t in conn.metadata(None).topics}
            if hidden in listed or seen not in listed:
                return False
        return True

    wait_until(hidden_everywhere, 20, what="every broker hiding the topic")
    # Removed through another broker: visible everywhere again.
    other = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    (f,) = other.delete_acls([_deny_describe(hidden, as_filter=True)]).values()
    assert len(f.result(20)) == 1

    def visible_everywhere() -> bool:
        for b in cluster.brokers.values():
            with RawConnection(b.bootstrap) as conn:
                if hidden not in {t.name for t in conn.metadata(None).topics}:
                    return False
        return True

    wait_until(visible_everywhere, 20, what="every broker showing the topic again")
    assert not cluster.zk.exists(f"/kafka-acl/Topic/{hidden}")


def test_a_quota_set_through_one_broker_is_known_to_every_broker(cluster: Cluster) -> None:
    client_id = unique("capped")
    ok("quotas", "alter", "--client-id", client_id, "--add-config", "producer_byte_rate=123456",
       "--bootstrap-server", cluster.brokers[2].bootstrap)
    assert json.loads(cluster.zk.get(f"/config/clients/{client_id}")[0]) == {
        "version": 1, "config": {"producer_byte_rate": "123456"}}

    def known_everywhere() -> bool:
        for b in cluster.brokers.values():
            listed = json.loads(ok("quotas", "describe", "--client-id", client_id, "--json",
                                   "--bootstrap-server", b.bootstrap))
            if listed != [{"entity": {"client-id": client_id}, "quotas": {"producer_byte_rate": 123456.0}}]:
                return False
        return True

    wait_until(known_everywhere, 20, what="every broker knowing the quota")
    ok("quotas", "alter", "--client-id", client_id, "--delete-config", "producer_byte_rate",
       "--bootstrap-server", cluster.brokers[1].bootstrap)
    wait_until(lambda: all(json.loads(ok("quotas", "describe", "--json", "--bootstrap-server", b.bootstrap)) == []
                           for b in cluster.brokers.values()), 20, what="every broker forgetting it")
