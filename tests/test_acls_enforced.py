"""ACLs enforced on every API, checked by behaviour: records written or not, offsets committed or
not, topics listed or hidden. Deny wins over allow, prefixed patterns match, and a refusal leaves an
audit line naming the principal and operation.

On a PLAINTEXT listener every client is User:ANONYMOUS, the principal these ACLs name; the ACLs it
starts with are written to the broker's ACL file beforehand, through the store the broker reads,
which is how a first administrator is given rights without super.users."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, request_class, values_batch, wait_until
from kio.static.primitive import i8

from strom.security.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from strom.security.acl_store import LocalAclStore

pytestmark = pytest.mark.timeout(120)

ME = "User:ANONYMOUS"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31


def acl(rtype: ResourceType, name: str, op: AclOperation, perm: AclPermission = AclPermission.ALLOW,
        pattern: PatternType = PatternType.LITERAL, principal: str = ME, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


# What the test's administrator starts with: the ACL APIs and topic creation.
ADMIN_ACLS = [acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER),
              acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CREATE)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("acl-enforced")
    LocalAclStore(data).add(ADMIN_ACLS)
    b = BrokerProcess(data, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                       "auto.create.topics.enable": "false"}).start()
    yield b
    b.stop()


def grant(broker: BrokerProcess, *bindings: AclBinding) -> None:
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in a.create_acls([_to_confluent(b) for b in bindings]).values():
        f.result(20)


def revoke(broker: BrokerProcess, *bindings: AclBinding) -> None:
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    filters = [_to_confluent(b, as_filter=True) for b in bindings]
    for f in a.delete_acls(filters).values():
        f.result(20)


def _to_confluent(b: AclBinding, as_filter: bool = False) -> Any:
    from confluent_kafka import admin as ck

    cls = ck.AclBindingFilter if as_filter else ck.AclBinding
    rtype = ck.ResourceType.BROKER if b.resource_type is ResourceType.CLUSTER else ck.ResourceType[b.resource_type.name]
    return cls(rtype, b.resource_name, ck.ResourcePatternType[b.pattern_type.name], b.principal, b.host,
               ck.AclOperation[b.operation.name], ck.AclPermissionType[b.permission.name])


def topic(broker: BrokerProcess, prefix: str) -> str:
    name = f"{prefix}-{time.monotonic_ns()}"
    with RawConnection(broker.bootstrap) as conn:
        conn.create_topic(name, 1)
    return name


def produce_error(broker: BrokerProcess, name: str, value: bytes = b"v") -> int:
    with RawConnection(broker.bootstrap) as conn:
        resp = conn.produce(name, 0, values_batch([value]))
    return int(resp.error_code)


def records_in(broker: BrokerProcess, name: str) -> list[bytes]:
    """What the partition holds, read with rights granted for the look and taken back after."""
    look = [acl(ResourceType.TOPIC, name, AclOperation.READ)]
    grant(broker, *look)
    try:
        with RawConnection(broker.bootstrap) as conn:
            return [r.value for r in conn.fetch_records(name, 0, 0)]
    finally:
        revoke(broker, *look)


def test_write_needs_write_and_deny_wins(secured: BrokerProcess) -> None:
    name = topic(secured, "w")
    assert produce_error(secured, name, b"refused") == TOPIC_AUTHORIZATION_FAILED
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.WRITE))
    assert produce_error(secured, name, b"allowed") == 0
    # A DENY for any host beats the ALLOW.
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.WRITE, AclPermission.DENY))
    assert produce_error(secured, name, b"denied") == TOPIC_AUTHORIZATION_FAILED
    assert records_in(secured, name) == [b"allowed"]
    secured.wait_for_log("DENIED User:ANONYMOUS", "WRITE on TOPIC:" + name)


def test_all_implies_every_operation_and_a_prefix_matches(secured: BrokerProcess) -> None:
    pre, other = topic(secured, "pre"), topic(secured, "other")
    grant(secured, acl(ResourceType.TOPIC, "pre-", AclOperation.ALL, pattern=PatternType.PREFIXED))
    assert produce_error(secured, pre) == 0
    assert produce_error(secured, other) == TOPIC_AUTHORIZATION_FAILED
    with RawConnection(secured.bootstrap) as conn:
        assert [r.value for r in conn.fetch_records(pre, 0, 0)] == [b"v"]
        refused = conn.fetch(other, 0, 0)
        assert int(refused.error_code) == TOPIC_AUTHORIZATION_FAILED
    assert records_in(secured, other) == []


def test_metadata_lists_only_what_may_be_described(secured: BrokerProcess) -> None:
    seen, hidden = topic(secured, "seen"), topic(secured, "hidden")
    grant(secured, acl(ResourceType.TOPIC, seen, AclOperation.DESCRIBE))
    with RawConnection(secured.bootstrap) as conn:
        listed = {t.name for t in conn.metadata(None).topics}
        asked = {t.name: int(t.error_code) for t in conn.metadata([seen, hidden]).topics}
    assert seen in listed and hidden not in listed
    assert asked == {seen: 0, hidden: TOPIC_AUTHORIZATION_FAILED}


def test_consumer_group_needs_read_on_the_group_and_the_topic(secured: BrokerProcess) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    name, group = topic(secured, "g"), f"grp-{time.monotonic_ns()}"
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.READ), acl(ResourceType.TOPIC, name, AclOperation.WRITE))
    assert produce_error(secured, name) == 0

    def commit() -> None:
        c = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(name, 0, 1)], asynchronous=False)
        finally:
            c.close()

    # Without DESCRIBE on the group its coordinator is not even named.
    fc = request_class("find_coordinator", 3, "FindCoordinatorRequest")
    with RawConnection(secured.bootstrap) as conn:
        assert int(conn.request(10, 3, fc(key=group, key_type=i8(0))).error_code) == GROUP_AUTHORIZATION_FAILED
    grant(secured, acl(ResourceType.GROUP, group, AclOperation.DESCRIBE))
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED|[Gg]roup authorization"):
        commit()
    grant(secured, acl(ResourceType.GROUP, group, AclOperation.READ))
    commit()
    c = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group})
    try:
        assert c.committed([TopicPartition(name, 0)], timeout=10)[0].offset == 1
    finally:
        c.close()


def test_admin_operations_need_their_rights(secured: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": secured.bootstrap})
    name = topic(secured, "adm")
    # DeleteTopics needs DELETE on the topic: refused, the topic stays.
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        a.delete_topics([name])[name].result(20)
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.DESCRIBE))
    with RawConnection(secured.bootstrap) as conn:
        assert int(conn.metadata([name]).topics[0].error_code) == 0
    # CreateTopics: without CREATE on the cluster, CREATE on the topic's name is needed.
    revoke(secured, ADMIN_ACLS[1])
    try:
        with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|[Aa]uthoriz"):
            a.create_topics([NewTopic("not-mine", 1, 1)])["not-mine"].result(20)
        grant(secured, acl(ResourceType.TOPIC, "mine-", AclOperation.CREATE, pattern=PatternType.PREFIXED))
        a.create_topics([NewTopic("mine-1", 1, 1)])["mine-1"].result(20)
    finally:
        grant(secured, ADMIN_ACLS[1])
    # Cluster-level APIs need the cluster's rights (DESCRIBE here, which ALTER implies).
    revoke(secured, ADMIN_ACLS[0])
    try:
        resp = _describe_acls_raw(secured)
        assert int(resp.error_code) == CLUSTER_AUTHORIZATION_FAILED
    finally:
        LocalAclStore(secured.data_dir).add(ADMIN_ACLS)  # no right left to grant it back with: the file
        secured.stop()
        secured.start()
    assert int(_describe_acls_raw(secured).error_code) == 0


def _describe_acls_raw(broker: BrokerProcess) -> Any:
    cls = request_class("describe_acls", 1, "DescribeAclsRequest")
    with RawConnection(broker.bootstrap) as conn:
        return conn.request(29, 1, cls(resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1),
                                       principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1)))


def test_acls_apply_at_once_and_survive_a_restart(secured: BrokerProcess) -> None:
    name = topic(secured, "persist")
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.WRITE))
    assert produce_error(secured, name) == 0
    secured.stop()
    secured.start()
    wait_until(lambda: produce_error(secured, name) == 0, 10, what="the ACL after a restart")


def test_strom_acls_add_list_remove_like_kafka_acls(secured: BrokerProcess) -> None:
    from test_cli_configs import ok, one_line_failure, strom

    name = topic(secured, "cli")
    b = ["--bootstrap-server", secured.bootstrap]
    assert produce_error(secured, name) == TOPIC_AUTHORIZATION_FAILED
    out = ok("acls", "add", "--allow-principal", ME, "--operation", "Write", "--operation", "describe",
             "--topic", name, *b)
    assert "Added 2 ACL(s)" in out
    assert produce_error(secured, name) == 0
    listed = json.loads(ok("acls", "list", "--topic", name, "--json", *b))
    assert {(r["principal"], r["operation"], r["permission"]) for r in listed} == {
        (ME, "WRITE", "ALLOW"), (ME, "DESCRIBE", "ALLOW")}
    assert "cluster" not in {r["name"] for r in listed}
    everything = ok("acls", "list", *b)
    assert name in everything and "kafka-cluster" in everything
    assert "Removed 1 ACL(s)" in ok("acls", "remove", "--allow-principal", ME, "--operation", "WRITE",
                                    "--topic", name, *b)
    assert produce_error(secured, name) == TOPIC_AUTHORIZATION_FAILED
    line = one_line_failure(strom("acls", "add", "--allow-principal", "alice", "--operation", "Read",
                                  "--topic", name, *b), 2)
    assert "User:NAME" in line
    line = one_line_failure(strom("acls", "add", "--allow-principal", ME, "--operation", "Fly", "--topic", name, *b), 2)
    assert "unknown operation" in line


def test_strom_acls_says_when_the_broker_has_no_authorizer(module_broker: BrokerProcess) -> None:
    from test_cli_configs import ok, one_line_failure, strom

    line = one_line_failure(strom("acls", "add", "--allow-principal", ME, "--operation", "Read", "--topic", "t",
                                  "--bootstrap-server", module_broker.bootstrap), 1)
    assert "authorizer.class.name" in line
    listed = ok("acls", "list", "--bootstrap-server", module_broker.bootstrap)
    assert "no authorizer" in listed


# ---- The matrix: each API refused without its ACL and served with it, checked by its effect ------
# (The cluster's DESCRIBE is not in it: the test's principal holds ALTER on the cluster to manage
# ACLs, and ALTER implies DESCRIBE; test_admin_operations_need_their_rights takes it away whole.)

class granted:
    """ACLs granted for a block and taken back after (the test's own look at the state)."""

    def __init__(self, broker: BrokerProcess, *bindings: AclBinding) -> None:
        self.broker, self.bindings = broker, bindings

    def __enter__(self) -> None:
        grant(self.broker, *self.bindings)

    def __exit__(self, *exc: object) -> None:
        revoke(self.broker, *self.bindings)


def _admin(broker: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _ok(future: Any) -> bool:
    """True when the AdminClient call succeeded, False when it was refused for authorization."""
    from confluent_kafka import KafkaException

    try:
        future.result(20)
        return True
    except KafkaException as e:
        assert "AUTHORIZATION" in str(e).upper(), e
        return False


def _config(broker: BrokerProcess, name: str, key: str) -> str | None:
    from confluent_kafka.admin import ConfigResource

    with granted(broker, acl(ResourceType.TOPIC, name, AclOperation.DESCRIBE_CONFIGS)):
        a = _admin(broker)  # kept alive until its answer
        (f,) = a.describe_configs([ConfigResource("topic", name)]).values()
        return f.result(20)[key].value  # type: ignore[no-any-return]


def _partitions(broker: BrokerProcess, name: str) -> int:
    with granted(broker, acl(ResourceType.TOPIC, name, AclOperation.DESCRIBE)), RawConnection(broker.bootstrap) as c:
        return len(c.metadata([name]).topics[0].partitions)


def _log_start(broker: BrokerProcess, name: str) -> int:
    with granted(broker, acl(ResourceType.TOPIC, name, AclOperation.DESCRIBE)), RawConnection(broker.bootstrap) as c:
        return c.list_offset(name, 0, -2)[0]


def _raw_error(broker: BrokerProcess, api: int, version: int, module: str, cls: str, **fields: Any) -> int:
    with RawConnection(broker.bootstrap) as conn:
        resp = conn.request(api, version, request_class(module, version, cls)(**fields))
    codes = [int(resp.error_code)] if hasattr(resp, "error_code") else []
    for t in getattr(resp, "topics", ()) or getattr(resp, "results", ()):
        codes += [int(p.error_code) for p in getattr(t, "partitions", ())]
    return max(codes, key=abs) if codes else 0


def case_list_offsets(b: BrokerProcess, name: str, group: str) -> bool:
    from helpers import ms  # noqa: F401  (timestamps are plain ints here)

    lo = request_class("list_offsets", 7, "ListOffsetsRequest")
    lt = request_class("list_offsets", 7, "ListOffsetsTopic")
    lp = request_class("list_offsets", 7, "ListOffsetsPartition")
    from kio.static.primitive import i32, i64

    code = _raw_error(b, 2, 7, "list_offsets", "ListOffsetsRequest", replica_id=-1, isolation_level=i8(0),
                      topics=(lt(name=name, partitions=(lp(partition_index=i32(0), current_leader_epoch=i32(-1),
                                                             timestamp=i64(-1)),)),)) if lo else 0
    assert code in (0, TOPIC_AUTHORIZATION_FAILED)
    return code == 0


def case_describe_configs(b: BrokerProcess, name: str, group: str) -> bool:
    from confluent_kafka.admin import ConfigResource

    a = _admin(b)
    (f,) = a.describe_configs([ConfigResource("topic", name)]).values()
    return _ok(f)


def case_alter_configs(b: BrokerProcess, name: str, group: str) -> bool:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    value = str(3_600_000 + time.monotonic_ns() % 1000)
    r = ConfigResource("topic", name, incremental_configs=[
        ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
    a = _admin(b)
    (f,) = a.incremental_alter_configs([r]).values()
    answered = _ok(f)
    assert answered == (_config(b, name, "retention.ms") == value)  # the change happened iff allowed
    return answered


def case_create_partitions(b: BrokerProcess, name: str, group: str) -> bool:
    from confluent_kafka.admin import NewPartitions

    before = _partitions(b, name)
    a = _admin(b)
    (f,) = a.create_partitions([NewPartitions(name, before + 1)]).values()
    answered = _ok(f)
    assert (_partitions(b, name) == before + 1) == answered
    return answered


def case_delete_records(b: BrokerProcess, name: str, group: str) -> bool:
    with granted(b, acl(ResourceType.TOPIC, name, AclOperation.WRITE)):
        assert produce_error(b, name, b"one") == 0
    target = _log_start(b, name) + 1
    lp = request_class("delete_records", 2, "DeleteRecordsPartition")
    lt = request_class("delete_records", 2, "DeleteRecordsTopic")
    from helpers import ms
    from kio.static.primitive import i32, i64

    code = _raw_error(b, 21, 2, "delete_records", "DeleteRecordsRequest", timeout=ms(5000), topics=(
        lt(name=name, partitions=(lp(partition_index=i32(0), offset=i64(target)),)),))
    assert (_log_start(b, name) == target) == (code == 0)
    return code == 0


def case_offset_fetch(b: BrokerProcess, name: str, group: str) -> bool:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        c.committed([TopicPartition(name, 0)], timeout=5)
        return True
    except KafkaException as e:
        assert "AUTHORIZATION" in str(e).upper() or "_TIMED_OUT" in str(e).upper(), e
        return False
    finally:
        c.close()


def case_describe_groups(b: BrokerProcess, name: str, group: str) -> bool:
    a = _admin(b)
    (f,) = a.describe_consumer_groups([group]).values()
    return _ok(f)


def case_init_producer_id(b: BrokerProcess, name: str, group: str) -> bool:
    from helpers import ms

    code = _raw_error(b, 22, 4, "init_producer_id", "InitProducerIdRequest", transactional_id=None,
                      transaction_timeout=ms(60000), producer_id=-1, producer_epoch=-1)
    assert code in (0, CLUSTER_AUTHORIZATION_FAILED)
    return code == 0


def case_consumer_group_heartbeat(b: BrokerProcess, name: str, group: str) -> bool:
    """A consumer-protocol member needs READ on its group and DESCRIBE on the topics it subscribes to."""
    import uuid

    from helpers import ms

    code = _raw_error(b, 68, 1, "consumer_group_heartbeat", "ConsumerGroupHeartbeatRequest", group_id=group,
                      member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout=ms(30000),
                      subscribed_topic_names=(name,), topic_partitions=())
    assert code in (0, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED), code
    return code == 0


def case_share_group_heartbeat(b: BrokerProcess, name: str, group: str) -> bool:
    """A share-group member needs the same: READ on its group, DESCRIBE on the topics it subscribes to."""
    import uuid

    code = _raw_error(b, 76, 1, "share_group_heartbeat", "ShareGroupHeartbeatRequest", group_id=group,
                      member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None, subscribed_topic_names=(name,))
    assert code in (0, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED), code
    return code == 0


MATRIX = [
    (case_list_offsets, [acl(ResourceType.TOPIC, "{topic}", AclOperation.DESCRIBE)]),
    (case_describe_configs, [acl(ResourceType.TOPIC, "{topic}", AclOperation.DESCRIBE_CONFIGS)]),
    (case_alter_configs, [acl(ResourceType.TOPIC, "{topic}", AclOperation.ALTER_CONFIGS)]),
    (case_create_partitions, [acl(ResourceType.TOPIC, "{topic}", AclOperation.ALTER)]),
    (case_delete_records, [acl(ResourceType.TOPIC, "{topic}", AclOperation.DELETE)]),
    (case_offset_fetch, [acl(ResourceType.GROUP, "{group}", AclOperation.DESCRIBE)]),
    (case_describe_groups, [acl(ResourceType.GROUP, "{group}", AclOperation.DESCRIBE)]),
    (case_consumer_group_heartbeat, [acl(ResourceType.GROUP, "{group}", AclOperation.READ),
                                     acl(ResourceType.TOPIC, "{topic}", AclOperation.DESCRIBE)]),
    (case_share_group_heartbeat, [acl(ResourceType.GROUP, "{group}", AclOperation.READ),
                                  acl(ResourceType.TOPIC, "{topic}", AclOperation.DESCRIBE)]),
]


@pytest.mark.parametrize(("case", "needed"), MATRIX, ids=[c.__name__.removeprefix("case_") for c, _ in MATRIX])
def test_each_api_is_refused_without_its_acl_and_served_with_it(secured: BrokerProcess, case: Any,
                                                                needed: list[AclBinding]) -> None:
    name, group = topic(secured, case.__name__[5:].replace("_", "-")), f"grp-{time.monotonic_ns()}"
    bindings = [AclBinding(b.resource_type, b.resource_name.format(topic=name, group=group), b.pattern_type,
                           b.principal, b.host, b.operation, b.permission) for b in needed]
    assert case(secured, name, group) is False, "served without its ACL"
    grant(secured, *bindings)
    try:
        assert case(secured, name, group) is True, "refused with its ACL"
        # A DENY of the same beats the ALLOW.
        denials = [AclBinding(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                              AclPermission.DENY) for b in bindings]
        grant(secured, *denials)
        assert case(secured, name, group) is False, "served despite a DENY"
        revoke(secured, *denials)
    finally:
        revoke(secured, *bindings)


def test_an_idempotent_producer_needs_write_somewhere_or_idempotent_write(tmp_path: Path) -> None:
    # A broker of its own: on the shared one, other tests' WRITE ACLs already let any producer in.
    LocalAclStore(tmp_path).add(ADMIN_ACLS)
    b = BrokerProcess(tmp_path, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}).start()
    try:
        name = topic(b, "idem")
        assert case_init_producer_id(b, name, "") is False
        for needed in (acl(ResourceType.TOPIC, name, AclOperation.WRITE),
                       acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)):
            grant(b, needed)
            assert case_init_producer_id(b, name, "") is True, needed
            revoke(b, needed)
            assert case_init_producer_id(b, name, "") is False, needed
    finally:
        b.stop()


def test_a_transactional_producer_needs_write_on_its_transactional_id(secured: BrokerProcess) -> None:
    from confluent_kafka import KafkaException, Producer

    name, txn = topic(secured, "txn"), f"tx-{time.monotonic_ns()}"
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.WRITE))

    def init() -> Any:
        p = Producer({"bootstrap.servers": secured.bootstrap, "transactional.id": txn})
        p.init_transactions(15)
        return p

    with pytest.raises(KafkaException, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED|[Tt]ransactional Id authorization"):
        init()
    grant(secured, acl(ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE))
    p = init()
    p.begin_transaction()
    p.produce(name, b"in a transaction")
    p.commit_transaction(15)
    # The record, then the COMMIT marker (a raw fetch shows control records too).
    assert records_in(secured, name)[:1] == [b"in a transaction"]


def test_share_group_offsets_apis_need_kafkas_acls(secured: BrokerProcess) -> None:
    """DescribeShareGroupOffsets needs DESCRIBE on the group and on each topic, AlterShareGroupOffsets
    READ on both, DeleteShareGroupOffsets DELETE on the group and READ on the topics (Kafka's
    KafkaApis): GROUP_AUTHORIZATION_FAILED for the whole request, TOPIC_AUTHORIZATION_FAILED per topic
    (a describe of every topic leaves the hidden ones out); nothing changes on a refusal."""
    from confluent_kafka import Producer
    from test_share_groups import fresh, poll_until, set_group_configs, share_consumer
    from test_share_groups_admin import alter, delete, describe_offsets, offsets_of

    group, name = fresh("sg"), topic(secured, "shq")
    rights = [acl(ResourceType.GROUP, group, AclOperation.ALL), acl(ResourceType.TOPIC, name, AclOperation.ALL)]
    grant(secured, *rights)
    set_group_configs(secured.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": secured.bootstrap})
    for v in (b"a", b"b", b"c"):
        p.produce(name, v, partition=0)
    assert p.flush(15) == 0
    c = share_consumer(secured.bootstrap, group, name)
    try:
        poll_until(c, lambda got: len(got) >= 3)
        c.commit_sync(15)
    finally:
        c.close()

    def empty() -> bool:
        with RawConnection(secured.bootstrap) as conn:
            d = conn.request(77, 1, request_class("share_group_describe", 1, "ShareGroupDescribeRequest")(
                group_ids=(group,), include_authorized_operations=False)).groups[0]
        return bool(d.group_state == "Empty")
    wait_until(empty, 20, what="the share group empty")
    with RawConnection(secured.bootstrap) as conn:
        assert offsets_of(describe_offsets(conn, group, {name: [0]})) == {(name, 0): (3, 0, 0)}
    denied_group = [acl(ResourceType.GROUP, group, op, AclPermission.DENY)
                    for op in (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.DELETE)]
    grant(secured, *denied_group)
    try:
        with RawConnection(secured.bootstrap) as conn:
            assert describe_offsets(conn, group, {name: [0]}).error_code == GROUP_AUTHORIZATION_FAILED
            assert alter(conn, group, {(name, 0): 0}).error_code == GROUP_AUTHORIZATION_FAILED
            assert delete(conn, group, [name]).error_code == GROUP_AUTHORIZATION_FAILED
    finally:
        revoke(secured, *denied_group)
    denied_topic = [acl(ResourceType.TOPIC, name, op, AclPermission.DENY)
                    for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    grant(secured, *denied_topic)
    try:
        with RawConnection(secured.bootstrap) as conn:
            d = describe_offsets(conn, group, {name: [0]})
            assert d.error_code == 0 and offsets_of(d) == {(name, 0): (-1, -1, TOPIC_AUTHORIZATION_FAILED)}
            assert offsets_of(describe_offsets(conn, group, None)) == {}  # left out when all are asked for
            r = alter(conn, group, {(name, 0): 0})
            assert r.error_code == 0
            assert [(t.topic_name, p.error_code) for t in r.responses for p in t.partitions] == [
                (name, TOPIC_AUTHORIZATION_FAILED)]
            r = delete(conn, group, [name])
            assert r.error_code == 0 and [(t.topic_name, t.error_code) for t in r.responses] == [
                (name, TOPIC_AUTHORIZATION_FAILED)]
    finally:
        revoke(secured, *denied_topic)
    with RawConnection(secured.bootstrap) as conn:
        assert offsets_of(describe_offsets(conn, group, {name: [0]})) == {(name, 0): (3, 0, 0)}  # unchanged
    revoke(secured, *rights)
