"""Attacks a client can make with well-formed requests, each refused the way Kafka refuses it, on a
real broker: the answer carries Kafka's error code, nothing is written or allocated, and the broker
keeps serving everyone else (docs/security.md, "What strom defends against")."""

from __future__ import annotations

import time
from typing import Any

import pytest
from brokerproc import BrokerProcess, free_port
from helpers import RawConnection, create_topics, ms, request_class, wait_until
from test_admin_api import call
from test_alter_configs import describe
from test_metrics import admin_url
from txn_helpers import txn_producer

from strom.coordinator import records as crec
from strom.protocol import wire
from strom.protocol.errors import ErrorCode as E
from strom.records import codec

pytestmark = pytest.mark.timeout(120)

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def delete_records(conn: RawConnection, topic: str, partition: int, offset: int) -> Any:
    req = request_class("delete_records", 2, "DeleteRecordsRequest")
    dt = request_class("delete_records", 2, "DeleteRecordsTopic")
    dp = request_class("delete_records", 2, "DeleteRecordsPartition")
    resp = conn.request(21, 2, req(topics=(dt(name=topic, partitions=(dp(partition_index=partition, offset=offset),)),),
                                   timeout=ms(10000)))
    ((p,),) = (t.partitions for t in resp.topics)
    return p


def committed(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=15)
        return int(tp.offset)
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offset: int, partition: int = 0) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def forged_offset_commit(group: str, topic: str, partition: int, offset: int) -> bytes:
    """A batch the group coordinator would replay as a commit of ``offset`` at its next load."""
    now = int(time.time() * 1000)
    key = crec.encode_offset_commit_key(crec.OffsetCommitKey(group, topic, partition))
    value = crec.encode_offset_commit_value(crec.OffsetCommitValue(offset, commit_timestamp=now))
    return codec.build_batch([(key, value)], timestamp_ms=now)


def txn_values(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    from txn_helpers import confluent_values

    return confluent_values(bootstrap, topic, 1, "read_committed", expect=expect)


# ---- 1. internal topics are the coordinators' own -------------------------------------------------


def test_produce_and_delete_records_on_internal_topics_are_refused(broker: Any) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"orders": 1, "paid": 1})
    commit(bs, "ledger", "orders", 3)  # makes __consumer_offsets
    producer = txn_producer(bs, "payer")  # makes __transaction_state
    producer.begin_transaction()
    producer.produce("paid", value=b"first", partition=0)
    producer.commit_transaction(20)
    del producer

    with RawConnection(bs) as c:
        for topic in INTERNAL_TOPICS:
            start, end = c.list_offset(topic, 0, -2)[0], c.log_end_offset(topic, 0)
            assert end > 0, f"{topic} has the coordinator's records"
            # Truncating would drop the groups' commits and the transactions' states.
            deleted = delete_records(c, topic, 0, -1)
            assert (int(deleted.error_code), deleted.low_watermark) == (E.invalid_topic_exception, -1), (topic, deleted)
            # A forged commit would be replayed as the group's at the next load.
            forged = forged_offset_commit("ledger", "paid", 0, 999)
            answer = c.produce(topic, 0, forged)
            assert (int(answer.error_code), answer.base_offset) == (E.invalid_topic_exception, -1), (topic, answer)
            assert int(c.produce(topic, 0, forged, acks=1, version=3).error_code) == E.invalid_topic_exception
            assert (c.list_offset(topic, 0, -2)[0], c.log_end_offset(topic, 0)) == (start, end), topic
        # An ordinary topic still takes both.
        assert int(c.produce("orders", 0, codec.build_batch([(None, b"x")] * 5)).error_code) == 0
        assert int(delete_records(c, "orders", 0, 1).error_code) == 0

    broker.restart()  # the coordinators replay their topics: what they wrote, and only that
    bs = broker.bootstrap
    assert committed(bs, "ledger", "orders") == 3
    assert committed(bs, "ledger", "paid") < 0  # no commit: the forged one was not stored
    assert txn_values(bs, "paid", 1) == [b"first"]
    # The coordinators' own writes go on: another commit, another transaction.
    commit(bs, "ledger", "orders", 4)
    producer = txn_producer(bs, "payer")
    producer.begin_transaction()
    producer.produce("paid", value=b"second", partition=0)
    producer.commit_transaction(20)
    assert committed(bs, "ledger", "orders") == 4
    assert txn_values(bs, "paid", 2) == [b"first", b"second"]


# ---- 2. topic names: Kafka's rule, the whole name -------------------------------------------------


def test_topic_names_with_a_trailing_newline_are_refused(module_broker: BrokerProcess) -> None:
    """A name ending in a newline passed a ``^...$`` match; it would have made a directory
    ``bad\n-0`` and a line break inside the broker's per-partition checkpoint files."""
    b = module_broker
    api = admin_url(b) + "/api"
    bad = ["bad\n", "x" * 248 + "\n", "ok.\n", "\n"]
    with RawConnection(b.bootstrap) as c:
        for name in bad:
            for validate_only in (True, False):
                created = c.create_topic(name, 1, validate_only=validate_only)
                assert int(created.error_code) == E.invalid_topic_exception, (name, validate_only, created)
            (auto,) = c.metadata([name], auto_create=True).topics
            assert int(auto.error_code) == E.invalid_topic_exception, (name, auto)
            status, body = call("POST", api + "/topics", {"name": name, "partitions": 1})
            assert (status, body.get("error_code")) == (400, E.invalid_topic_exception), (name, body)
        # Kafka's rule still lets every legal name through, up to 249 characters.
        for name in ("x" * 249, "._-", "Legal.Name_09-"):
            assert int(c.create_topic(name, 1).error_code) == 0, name
        names = {t.name for t in c.metadata(None).topics}
    assert not [n for n in names if "\n" in n]
    assert not [p.name for p in b.data_dir.iterdir() if "\n" in p.name]
    assert {"._--0", "Legal.Name_09--0"} <= {p.name for p in b.data_dir.iterdir()}


# ---- 3. partitions per request: Kafka's bound, before any allocation -------------------------------

MAX_PARTITIONS = 10_000  # Kafka's per-request bound
HUGE = 2**31 - 1
RSS_SLACK = 16 << 20  # what serving a few requests may add; the refused requests would take gigabytes


def create_topics_request(conn: RawConnection, topics: dict[str, int], validate_only: bool = False) -> list[Any]:
    req = request_class("create_topics", 7, "CreateTopicsRequest")
    ct = request_class("create_topics", 7, "CreatableTopic")
    body = req(topics=tuple(ct(name=n, num_partitions=p, replication_factor=1, assignments=(), configs=())
                            for n, p in topics.items()), timeout=ms(30000), validate_only=validate_only)
    return list(conn.request(19, 7, body).topics)


def create_partitions_request(conn: RawConnection, counts: dict[str, int], validate_only: bool = False) -> list[Any]:
    req = request_class("create_partitions", 3, "CreatePartitionsRequest")
    topic = request_class("create_partitions", 3, "CreatePartitionsTopic")
    body = req(topics=tuple(topic(name=n, count=c, assignments=None) for n, c in counts.items()),
               timeout=ms(30000), validate_only=validate_only)
    return list(conn.request(37, 3, body).results)


def partition_dirs(b: BrokerProcess, topic: str) -> list[str]:
    return [d.name for d in b.data_dir.iterdir() if d.is_dir() and d.name.rpartition("-")[0] == topic]


@pytest.mark.parametrize("way", ["create-topics", "create-topics-validate-only", "create-topics-summed",
                                 "create-partitions", "create-partitions-validate-only", "create-partitions-summed",
                                 "rest"])
def test_requests_for_too_many_partitions_are_refused(module_broker: BrokerProcess, way: str) -> None:
    b = module_broker
    api = admin_url(b) + "/api"
    grown = [f"grown-{way}-{i}" for i in range(2)]
    with RawConnection(b.bootstrap) as c:
        created = create_topics_request(c, {name: 1 for name in grown} | {f"warm-{way}": 3})  # every path warm
        assert [int(t.error_code) for t in created] == [0, 0, 0]
        assert call("POST", api + "/topics", {"name": f"warm-rest-{way}", "partitions": 1})[0] == 201
        rss = b.rss_bytes()
        victim = f"huge-{way}"
        if way.startswith("create-topics"):
            asked = {victim: HUGE} if way != "create-topics-summed" else {victim: 5_001, f"{victim}-2": 5_000}
            answers = create_topics_request(c, asked, validate_only=way.endswith("validate-only"))
            assert [(t.name, int(t.error_code), t.num_partitions) for t in answers] == \
                [(n, E.policy_violation, -1) for n in asked]
        elif way.startswith("create-partitions"):
            asked = {grown[0]: HUGE} if way != "create-partitions-summed" else {grown[0]: 5_002, grown[1]: 5_001}  # 10,001 new
            answers = create_partitions_request(c, asked, validate_only=way.endswith("validate-only"))
            assert [(t.name, int(t.error_code)) for t in answers] == [(n, E.policy_violation) for n in asked]
        else:
            status, body = call("POST", api + "/topics", {"name": victim, "partitions": HUGE})
            assert (status, body.get("error_code")) == (400, E.policy_violation), body
        grew = b.rss_bytes() - rss
        assert grew < RSS_SLACK, f"the broker's RSS grew by {grew >> 20} MiB"
        # Nothing made, nothing half made; and the broker goes on serving.
        assert not partition_dirs(b, victim) and not partition_dirs(b, f"{victim}-2")
        assert [len(partition_dirs(b, name)) for name in grown] == [1, 1]
        (after,) = create_topics_request(c, {f"after-{way}": 3})
        assert int(after.error_code) == 0 and after.num_partitions == 3
        assert len(partition_dirs(b, f"after-{way}")) == 3
        assert {t.name: len(t.partitions) for t in c.metadata(grown).topics} == dict.fromkeys(grown, 1)


def test_ten_thousand_partitions_are_not_refused(module_broker: BrokerProcess) -> None:
    """The bound is Kafka's: 10,000 partitions in one request are allowed (checked validate-only)."""
    with RawConnection(module_broker.bootstrap) as c:
        (one,) = create_topics_request(c, {"ten-thousand": MAX_PARTITIONS}, validate_only=True)
        assert (int(one.error_code), one.num_partitions) == (0, MAX_PARTITIONS)
        two = create_topics_request(c, {"five-a": 5_000, "five-b": 5_000}, validate_only=True)
        assert [(int(t.error_code), t.num_partitions) for t in two] == [(0, 5_000), (0, 5_000)]
        over = create_topics_request(c, {"five-a": 5_000, "five-b": 5_001}, validate_only=True)
        assert [int(t.error_code) for t in over] == [E.policy_violation] * 2
        create_topics_request(c, {"grows": 1})
        (grows,) = create_partitions_request(c, {"grows": 1 + MAX_PARTITIONS}, validate_only=True)
        assert int(grows.error_code) == 0
        (too_far,) = create_partitions_request(c, {"grows": 2 + MAX_PARTITIONS}, validate_only=True)
        assert int(too_far.error_code) == E.policy_violation
    assert not partition_dirs(module_broker, "ten-thousand") and len(partition_dirs(module_broker, "grows")) == 1


# ---- 4. AlterConfigs / IncrementalAlterConfigs with thousands of resources ---------------------------

RESOURCES = 8_000
TOPIC_RESOURCE = 2
DUPLICATES = {1: "dup-a", 2: "dup-b", 3: "dup-b", 4_000: "dup-a", RESOURCES - 1: "dup-a"}


def alter_configs_body(api: str, version: int, topic: str) -> Any:
    """8,000 topic resources: ``topic`` first (retention.ms=1234), two names given more than once,
    and names of topics that do not exist."""
    req = request_class(api, version, f"{''.join(w.title() for w in api.split('_'))}Request")
    res = request_class(api, version, "AlterConfigsResource")
    cfg = request_class(api, version, "AlterableConfig")
    setting = {"name": "retention.ms", "value": "1234"}
    if api == "incremental_alter_configs":
        setting["config_operation"] = 0  # SET
    names = [topic] + [DUPLICATES.get(i, f"missing-{i}") for i in range(1, RESOURCES)]
    return req(validate_only=False, resources=tuple(
        res(resource_type=TOPIC_RESOURCE, resource_name=n, configs=(cfg(**setting),)) for n in names))


def alter_many_while_another_client_is_served(b: BrokerProcess, api: str, key: int, version: int,
                                              topic: str) -> list[tuple[int, str]]:
    with RawConnection(b.bootstrap, timeout=60) as attacker, RawConnection(b.bootstrap) as other:
        corr = attacker.send(key, version, alter_configs_body(api, version, topic))
        assert int(other.api_versions().error_code) == 0  # served whether or not the big one is done
        got, resp = wire.decode_response(key, version, attacker.read_frame())
        assert got == corr
        assert int(other.api_versions().error_code) == 0
    return [(int(r.error_code), r.resource_name) for r in resp.responses]


@pytest.mark.parametrize(("api", "key", "version"), [("alter_configs", 33, 2), ("incremental_alter_configs", 44, 1)])
def test_thousands_of_config_resources_are_each_answered(module_broker: BrokerProcess, api: str, key: int,
                                                         version: int) -> None:
    topic = f"configured-{key}"
    with RawConnection(module_broker.bootstrap) as c:
        assert int(c.create_topic(topic, 1).error_code) == 0
    answers = alter_many_while_another_client_is_served(module_broker, api, key, version, topic)
    assert len(answers) == RESOURCES
    assert answers[0] == (0, topic)
    for i, (code, name) in enumerate(answers[1:], start=1):
        if i in DUPLICATES:  # every copy of a resource named twice, as Kafka answers it
            assert (code, name) == (E.invalid_request, DUPLICATES[i]), i
        else:
            assert (code, name) == (E.unknown_topic_or_partition, f"missing-{i}"), i
    assert describe(module_broker.bootstrap, "topic", topic)["retention.ms"].value == "1234"


@pytest.mark.parametrize(("api", "key", "version"), [("alter_configs", 33, 2), ("incremental_alter_configs", 44, 1)])
def test_thousands_of_config_resources_from_a_principal_without_rights(broker_factory: Any, api: str, key: int,
                                                                       version: int) -> None:
    """Duplicates are refused first, whoever asks; then each resource is authorized on its own."""
    b = broker_factory(overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    answers = alter_many_while_another_client_is_served(b, api, key, version, "no-such-right")
    assert len(answers) == RESOURCES
    expected = [(E.invalid_request, DUPLICATES[i]) if i in DUPLICATES else
                (E.topic_authorization_failed, "no-such-right" if i == 0 else f"missing-{i}") for i in range(RESOURCES)]
    assert answers == expected


class CountingName(str):
    """A resource name that counts how often it is compared with another."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountingName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_duplicate_resources_are_found_in_one_pass() -> None:
    """The duplicate check compares names a bounded number of times per resource (a dict), not each
    with every other (it did: 1.9 s of the event loop for 8,000 resources, for any principal)."""
    from types import SimpleNamespace

    from strom.broker.config_admin import alter_resources

    altered: list[str] = []
    admin = SimpleNamespace(alter=lambda _type, name, _configs, _validate_only: altered.append(name))
    acls = SimpleNamespace(config_resource_error=lambda *a: 0)
    names = [CountingName(f"t{i}") for i in range(RESOURCES)] + [CountingName("t7"), CountingName("t7")]
    request = SimpleNamespace(validate_only=False, resources=[
        SimpleNamespace(resource_type=TOPIC_RESOURCE, resource_name=n, configs=()) for n in names])
    CountingName.comparisons = 0
    response = alter_resources(admin, acls, None, request, lambda r: {})  # type: ignore[arg-type]
    assert CountingName.comparisons < 4 * len(names), CountingName.comparisons
    codes = [r["error_code"] for r in response["responses"]]
    assert [i for i, code in enumerate(codes) if code] == [7, RESOURCES, RESOURCES + 1]
    assert codes[7] == codes[-2] == codes[-1] == E.invalid_request and len(altered) == RESOURCES - 1


def test_host_acls_match_ipv4_clients_of_a_dual_stack_listener(broker_factory: Any) -> None:
    """An IPv4 client of a listener on [::] arrives as ::ffff:127.0.0.1; a host ACL for 127.0.0.1
    must match it, as it does in Kafka (the address is the IPv4 one)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as CkResourceType
    port = free_port()
    b = broker_factory(port=port, overrides={
        "listeners": f"PLAINTEXT://[::]:{port}", "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    create_topics(b.bootstrap, {"by-host": 1, "other-host": 1})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    bindings = [AclBinding(CkResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", host,
                           AclOperation.ALL, AclPermissionType.ALLOW)
                for topic, host in (("by-host", "127.0.0.1"), ("other-host", "10.9.9.9"))]
    for f in admin.create_acls(bindings).values():
        f.result(10)

    def errors() -> dict[str, int]:
        with RawConnection(b.bootstrap) as conn:
            md = conn.metadata(["by-host", "other-host"])
        return {str(t.name): int(t.error_code) for t in md.topics}

    # The ACL for this client's address serves it; one for another address does not.
    wait_until(lambda: errors() == {"by-host": 0, "other-host": int(E.topic_authorization_failed)}, 10,
               what="the ACLs in force, matched by the IPv4 address")
