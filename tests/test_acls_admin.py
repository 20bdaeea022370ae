"""CreateAcls, DescribeAcls and DeleteAcls (29-31) from confluent-kafka's AdminClient and over the
wire: bindings round-trip, filters match as Kafka's do, ACLs survive a restart, bad bindings are
refused with INVALID_REQUEST, and a broker without an authorizer answers SECURITY_DISABLED."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, request_class

pytestmark = pytest.mark.timeout(90)

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              # A PLAINTEXT listener's principal is User:ANONYMOUS: let it administer the ACLs.
              "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acl"), overrides=AUTHORIZER).start()
    yield b
    b.stop()


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def binding(rtype: str, name: str, principal: str, op: str, perm: str = "ALLOW", pattern: str = "LITERAL",
            host: str = "*") -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[op], AclPermissionType[perm])


def as_tuple(b: Any) -> tuple[str, str, str, str, str, str, str]:
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


def describe(a: Any, rtype: str = "ANY", name: str | None = None, pattern: str = "ANY",
             principal: str | None = None) -> set[tuple[str, ...]]:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    f = AclBindingFilter(ResourceType[rtype], name, ResourcePatternType[pattern], principal, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    return {as_tuple(b) for b in a.describe_acls(f).result(20)}


def test_acls_round_trip_and_filters_match_as_kafkas(acl_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    a = admin(acl_broker.bootstrap)
    wanted = [binding("TOPIC", "orders", "User:alice", "READ"),
              binding("TOPIC", "orders", "User:bob", "WRITE", "DENY"),
              binding("TOPIC", "ord", "User:carol", "DESCRIBE", pattern="PREFIXED"),
              binding("TOPIC", "*", "User:dave", "READ"),
              binding("GROUP", "g1", "User:alice", "READ", host="127.0.0.1"),
              binding("BROKER", "kafka-cluster", "User:ops", "ALTER")]  # librdkafka's name for the cluster
    for f in a.create_acls(wanted).values():
        f.result(20)
    everything = describe(a)
    assert everything == {as_tuple(b) for b in wanted}
    # LITERAL: exactly that name; PREFIXED: exactly that prefix; MATCH: all that cover the name.
    assert describe(a, "TOPIC", "orders", "LITERAL") == {as_tuple(wanted[0]), as_tuple(wanted[1])}
    assert describe(a, "TOPIC", "ord", "PREFIXED") == {as_tuple(wanted[2])}
    assert describe(a, "TOPIC", "orders", "MATCH") == {as_tuple(b) for b in wanted[:4]}
    assert describe(a, "TOPIC", "other", "MATCH") == {as_tuple(wanted[3])}
    assert describe(a, principal="User:alice") == {as_tuple(wanted[0]), as_tuple(wanted[4])}
    # Creating the same binding again changes nothing.
    for f in a.create_acls([wanted[0]]).values():
        f.result(20)
    assert describe(a) == everything

    # Delete by filter: the answer lists what went.
    f = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    deleted = a.delete_acls([f])[f].result(20)
    assert {as_tuple(b) for b in deleted} == {as_tuple(wanted[0]), as_tuple(wanted[1])}
    assert describe(a) == {as_tuple(b) for b in wanted[2:]}

    # The rest survive a restart.
    acl_broker.stop()
    acl_broker.start()
    assert describe(admin(acl_broker.bootstrap)) == {as_tuple(b) for b in wanted[2:]}


def raw_create(bootstrap: str, **fields: Any) -> Any:
    creation_cls = request_class("create_acls", 3, "AclCreation")
    req_cls = request_class("create_acls", 3, "CreateAclsRequest")
    base = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
            "host": "*", "operation": 3, "permission_type": 3}
    base.update(fields)
    from kio.static.primitive import i8

    creation = creation_cls(**{k: (i8(v) if isinstance(v, int) else v) for k, v in base.items()})
    with RawConnection(bootstrap) as conn:
        return conn.request(30, 3, req_cls(creations=(creation,)))


@pytest.mark.parametrize("bad", [
    {"resource_type": 1},  # ANY is a filter value, not a resource
    {"resource_type": 99},  # no such type
    {"resource_pattern_type": 2},  # MATCH is a filter value
    {"operation": 1},  # ANY
    {"operation": 9},  # CLUSTER_ACTION does not apply to a topic
    {"permission_type": 1},  # ANY
    {"principal": "alice"},  # not TYPE:NAME
    {"resource_type": 4, "resource_name": "other"},  # the cluster is 'kafka-cluster'
])
def test_bad_bindings_are_refused_and_nothing_is_stored(acl_broker: BrokerProcess, bad: dict[str, Any]) -> None:
    before = describe(admin(acl_broker.bootstrap))
    resp = raw_create(acl_broker.bootstrap, **bad)
    assert [int(r.error_code) for r in resp.results] == [42]  # INVALID_REQUEST
    assert resp.results[0].error_message
    assert describe(admin(acl_broker.bootstrap)) == before


def test_without_an_authorizer_the_acl_apis_say_security_disabled(module_broker: BrokerProcess) -> None:
    resp = raw_create(module_broker.bootstrap)
    assert [int(r.error_code) for r in resp.results] == [54]  # SECURITY_DISABLED
    cls = request_class("describe_acls", 1, "DescribeAclsRequest")
    from kio.static.primitive import i8

    with RawConnection(module_broker.bootstrap) as conn:
        described = conn.request(29, 1, cls(resource_type_filter=i8(1), resource_name_filter=None,
                                            pattern_type_filter=i8(1), principal_filter=None, host_filter=None,
                                            operation=i8(1), permission_type=i8(1)))
    assert int(described.error_code) == 54 and described.resources == ()


def test_an_unknown_authorizer_stops_the_broker_with_one_line(tmp_path: Any) -> None:
    b = BrokerProcess(tmp_path, overrides={"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(RuntimeError) as e:
        b.start(timeout=20)
    assert "authorizer.class.name" in str(e.value)
