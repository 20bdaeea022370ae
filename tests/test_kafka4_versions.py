"""Kafka 4's newest API versions, each asked over the wire at that version and held to what it means:
topics named by id (Produce 13, OffsetCommit/OffsetFetch 10, Fetch 17/18), Metadata 13's top-level
error code, ListOffsets 11's earliest-pending-upload lookup, InitProducerId 6's two-phase commit
refused as Kafka refuses it by default, DescribeLogDirs 5, ListTransactions 2's pattern,
DescribeTopicPartitions' pages and ACLs, and the versions of transactions V2 that strom leaves out
(it finalizes no transaction.version)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, ms, request_class, values_batch, wait_until

from strom.protocol.errors import ErrorCode as E
from strom.records.batch import TRANSACTIONAL_MASK
from strom.security.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from strom.security.acl_store import LocalAclStore

pytestmark = pytest.mark.timeout(120)

UNKNOWN_ID = uuid.UUID("00000000-0000-4000-8000-00000000dead")


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def produce_v13(conn: RawConnection, topic_id: uuid.UUID, partition: int, records: bytes,
                transactional_id: str | None = None, version: int = 13) -> Any:
    req = request_class("produce", version, "ProduceRequest")
    tpd = request_class("produce", version, "TopicProduceData")
    ppd = request_class("produce", version, "PartitionProduceData")
    return conn.request(0, version, req(transactional_id=transactional_id, acks=-1, timeout=ms(10000), topic_data=(
        tpd(topic_id=topic_id, partition_data=(ppd(index=partition, records=records),)),)))


def fetch_by_id(conn: RawConnection, topic_id: uuid.UUID, version: int, high_watermark: int = 2**63 - 1) -> Any:
    req = request_class("fetch", version, "FetchRequest")
    ft = request_class("fetch", version, "FetchTopic")
    fp = request_class("fetch", version, "FetchPartition")
    extra: dict[str, Any] = {"replica_directory_id": uuid.uuid4()}
    if version >= 18:
        extra["high_watermark"] = high_watermark
    body = req(cluster_id=None, max_wait=ms(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
               session_epoch=-1, forgotten_topics_data=(), rack_id="",
               topics=(ft(topic_id=topic_id, partitions=(fp(
                   partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                   partition_max_bytes=1 << 20, **extra),)),))
    (t,) = conn.request(1, version, body).responses
    (p,) = t.partitions
    return t, p


def test_api_versions_reach_kafka_4s_newest_but_transactions_v2(module_broker: BrokerProcess) -> None:
    with RawConnection(module_broker.bootstrap) as conn:
        resp = conn.api_versions()
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    assert ranges[0] == (3, 13) and ranges[1] == (4, 18) and ranges[2] == (1, 11) and ranges[3] == (0, 13)
    assert ranges[8] == (2, 10) and ranges[9] == (1, 10) and ranges[22] == (0, 6)
    assert ranges[35] == (1, 5) and ranges[66] == (0, 2) and ranges[75] == (0, 0)
    # Transactions V2 only: EndTxn 5, WriteTxnMarkers 2, TxnOffsetCommit 5 are not served, and no
    # transaction.version is finalized (so KIP-890 clients keep transactions V1).
    assert ranges[26] == (0, 4) and ranges[27] == (1, 1) and ranges[28] == (0, 4)
    assert all(f.name != "transaction.version" for f in resp.finalized_features)


def test_produce_v13_by_topic_id_then_fetch_v17_v18_by_id(module_broker: BrokerProcess) -> None:
    name = unique("by-id")
    with RawConnection(module_broker.bootstrap) as conn:
        assert int(conn.create_topic(name, 1).error_code) == 0
        topic_id = conn.topic_id(name)
        resp = produce_v13(conn, topic_id, 0, values_batch([b"one", b"two"]))
        (t,) = resp.responses
        assert t.topic_id == topic_id
        (p,) = t.partition_responses
        assert int(p.error_code) == 0 and int(p.base_offset) == 0
        # The same log by name, and by id at the two new Fetch versions.
        assert [r.value for r in conn.fetch_records(name, 0)] == [b"one", b"two"]
        for version in (17, 18):
            ft, fp = fetch_by_id(conn, topic_id, version, high_watermark=0)
            assert ft.topic_id == topic_id and int(fp.error_code) == 0 and int(fp.high_watermark) == 2
            assert b"two" in bytes(fp.records or b"")


def test_produce_v13_to_an_unknown_topic_id(module_broker: BrokerProcess) -> None:
    with RawConnection(module_broker.bootstrap) as conn:
        (t,) = produce_v13(conn, UNKNOWN_ID, 0, values_batch([b"x"])).responses
        (p,) = t.partition_responses
        assert t.topic_id == UNKNOWN_ID and int(p.error_code) == E.unknown_topic_id
        _, fp = fetch_by_id(conn, UNKNOWN_ID, 18)
        assert int(fp.error_code) == E.unknown_topic_id


@pytest.mark.parametrize("version", [12, 13])
def test_transactional_produce_of_transactions_v2_is_refused(module_broker: BrokerProcess, version: int) -> None:
    """Produce v12+ would add the partition to the transaction itself (transactions V2); strom runs
    V1, so the batch is refused, not appended to a transaction that does not hold the partition."""
    name = unique("txn-v2")
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic(name, 1)
        topic_id = conn.topic_id(name)
        batch = values_batch([b"t"], producer_id=1, producer_epoch=0, base_sequence=0, attributes_extra=TRANSACTIONAL_MASK)
        if version == 13:
            (t,) = produce_v13(conn, topic_id, 0, batch, transactional_id="tx-v2").responses
        else:
            req = request_class("produce", 12, "ProduceRequest")
            tpd = request_class("produce", 12, "TopicProduceData")
            ppd = request_class("produce", 12, "PartitionProduceData")
            (t,) = conn.request(0, 12, req(transactional_id="tx-v2", acks=-1, timeout=ms(10000), topic_data=(
                tpd(name=name, partition_data=(ppd(index=0, records=batch),)),))).responses
        (p,) = t.partition_responses
        assert int(p.error_code) == E.unsupported_version and "transaction.version" in p.error_message
        assert conn.log_end_offset(name, 0) == 0
        # A non-transactional v12 produce is an ordinary one.
        (t,) = produce_v13(conn, topic_id, 0, values_batch([b"plain"]), version=13).responses
        assert int(t.partition_responses[0].error_code) == 0


def test_metadata_v13_has_a_top_level_error_code(module_broker: BrokerProcess) -> None:
    name = unique("md13")
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic(name, 2)
        md = conn.metadata([name], version=13)
    assert int(md.error_code) == 0
    (t,) = md.topics
    assert t.name == name and int(t.error_code) == 0 and len(t.partitions) == 2


def offset_commit_v10(conn: RawConnection, group: str, topic_id: uuid.UUID, offsets: dict[int, int]) -> Any:
    req = request_class("offset_commit", 10, "OffsetCommitRequest")
    rt = request_class("offset_commit", 10, "OffsetCommitRequestTopic")
    rp = request_class("offset_commit", 10, "OffsetCommitRequestPartition")
    return conn.request(8, 10, req(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, topics=(rt(topic_id=topic_id, partitions=tuple(
                                       rp(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                          committed_metadata="m") for p, o in offsets.items())),)))


def offset_fetch(conn: RawConnection, group: str, version: int, topic: Any = None, partitions: tuple[int, ...] = ()
                 ) -> Any:
    req = request_class("offset_fetch", version, "OffsetFetchRequest")
    rg = request_class("offset_fetch", version, "OffsetFetchRequestGroup")
    rt = request_class("offset_fetch", version, "OffsetFetchRequestTopics")
    key = "topic_id" if version >= 10 else "name"
    topics = None if topic is None else (rt(**{key: topic}, partition_indexes=partitions),)
    (g,) = conn.request(9, version, req(groups=(rg(group_id=group, member_id=None, member_epoch=-1, topics=topics),),
                                        require_stable=False)).groups
    assert int(g.error_code) == 0, g
    return g


def test_offset_commit_v10_and_offset_fetch_v10_by_topic_id(module_broker: BrokerProcess) -> None:
    name, group = unique("oc10"), unique("g10")
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic(name, 2)
        topic_id = conn.topic_id(name)

        def commit() -> Any:
            resp = offset_commit_v10(conn, group, topic_id, {0: 5, 1: 7})
            return resp if int(resp.topics[0].partitions[0].error_code) == 0 else None

        resp = wait_until(commit, what="the commit")  # retried while the coordinator loads
        (t,) = resp.topics
        assert t.topic_id == topic_id and [int(p.error_code) for p in t.partitions] == [0, 0]
        # By id at v10, asked for by id or for every topic; by name at v9: one commit.
        (ft,) = offset_fetch(conn, group, 10, topic_id, (0, 1)).topics
        assert ft.topic_id == topic_id
        assert [(int(p.committed_offset), p.metadata) for p in ft.partitions] == [(5, "m"), (7, "m")]
        (ft,) = offset_fetch(conn, group, 10).topics
        assert ft.topic_id == topic_id and sorted(int(p.committed_offset) for p in ft.partitions) == [5, 7]
        (ft,) = offset_fetch(conn, group, 9, name, (0, 1)).topics
        assert ft.name == name and [int(p.committed_offset) for p in ft.partitions] == [5, 7]
        # An id this cluster does not know.
        (t,) = offset_commit_v10(conn, group, UNKNOWN_ID, {0: 1}).topics
        assert t.topic_id == UNKNOWN_ID and int(t.partitions[0].error_code) == E.unknown_topic_id
        (ft,) = offset_fetch(conn, group, 10, UNKNOWN_ID, (0,)).topics
        assert ft.topic_id == UNKNOWN_ID and int(ft.partitions[0].error_code) == E.unknown_topic_id
        assert int(ft.partitions[0].committed_offset) == -1


def test_list_offsets_v11_earliest_pending_upload_without_tiered_storage(module_broker: BrokerProcess) -> None:
    name = unique("lo11")
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic(name, 1)
        conn.produce(name, 0, values_batch([b"a", b"b", b"c"]))
        req = request_class("list_offsets", 11, "ListOffsetsRequest")
        lt = request_class("list_offsets", 11, "ListOffsetsTopic")
        lp = request_class("list_offsets", 11, "ListOffsetsPartition")

        def lookup(timestamp: int) -> tuple[int, int]:
            (t,) = conn.request(2, 11, req(replica_id=-1, isolation_level=0, timeout=ms(1000), topics=(
                lt(name=name, partitions=(lp(partition_index=0, current_leader_epoch=-1, timestamp=timestamp),)),
            ))).topics
            (p,) = t.partitions
            assert int(p.error_code) == 0, p
            assert (int(p.leader_epoch) == -1) == (int(p.offset) == -1), p  # no offset, no epoch
            return int(p.offset), int(p.timestamp)

        assert lookup(-1) == (3, -1)  # latest
        assert lookup(-2) == (0, -1)  # earliest
        assert lookup(-4) == (0, -1)  # earliest local: the whole log is local
        assert lookup(-5) == (-1, -1)  # latest tiered: nothing tiered
        assert lookup(-6) == (-1, -1)  # earliest pending upload: nothing to upload


def test_init_producer_id_v6_refuses_two_phase_commit(module_broker: BrokerProcess) -> None:
    req = request_class("init_producer_id", 6, "InitProducerIdRequest")
    with RawConnection(module_broker.bootstrap) as conn:
        plain = conn.request(22, 6, req(transactional_id=None, transaction_timeout=ms(60000), producer_id=-1,
                                        producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False))
        assert int(plain.error_code) == 0 and int(plain.producer_id) >= 0
        assert (int(plain.ongoing_txn_producer_id), int(plain.ongoing_txn_producer_epoch)) == (-1, -1)
        for flags in ({"enable2_pc": True, "keep_prepared_txn": False}, {"enable2_pc": True, "keep_prepared_txn": True}):
            resp = conn.request(22, 6, req(transactional_id=unique("2pc"), transaction_timeout=ms(60000),
                                           producer_id=-1, producer_epoch=-1, **flags))
            assert int(resp.error_code) == E.transactional_id_authorization_failed
            assert int(resp.producer_id) == -1


def test_list_transactions_v2_filters_by_pattern(module_broker: BrokerProcess) -> None:
    stem = unique("lt2")
    ids = [f"{stem}-keep-1", f"{stem}-keep-2", f"{stem}-other"]
    init = request_class("init_producer_id", 6, "InitProducerIdRequest")
    req = request_class("list_transactions", 2, "ListTransactionsRequest")
    with RawConnection(module_broker.bootstrap) as conn:
        for txn_id in ids:
            wait_until(lambda t=txn_id: int(conn.request(22, 6, init(
                transactional_id=t, transaction_timeout=ms(60000), producer_id=-1, producer_epoch=-1,
                enable2_pc=False, keep_prepared_txn=False)).error_code) == 0, what=f"InitProducerId {txn_id}")

        def listed(pattern: str | None) -> list[str]:
            resp = conn.request(66, 2, req(state_filters=(), producer_id_filters=(), duration_filter=-1,
                                           transactional_id_pattern=pattern))
            assert int(resp.error_code) == 0, resp
            return sorted(s.transactional_id for s in resp.transaction_states if s.transactional_id.startswith(stem))

        assert listed(None) == listed("") == ids
        assert listed(f"{stem}-keep-.*") == ids[:2]
        assert listed("keep") == []  # the whole id must match
        bad = conn.request(66, 2, req(state_filters=(), producer_id_filters=(), duration_filter=-1,
                                      transactional_id_pattern="(unclosed"))
        assert int(bad.error_code) == E.invalid_regular_expression and bad.transaction_states == ()


def test_describe_log_dirs_v5_says_no_directory_is_cordoned(module_broker: BrokerProcess) -> None:
    name = unique("dld5")
    req = request_class("describe_log_dirs", 5, "DescribeLogDirsRequest")
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic(name, 1)
        resp = conn.request(35, 5, req(topics=None))
    assert int(resp.error_code) == 0 and resp.results
    assert all(r.is_cordoned is False for r in resp.results)
    assert any(t.name == name for r in resp.results for t in r.topics)


# ---- DescribeTopicPartitions (75) ----------------------------------------------------------------


def describe_topic_partitions(conn: RawConnection, names: list[str], limit: int,
                              cursor: tuple[str, int] | None = None) -> Any:
    req = request_class("describe_topic_partitions", 0, "DescribeTopicPartitionsRequest")
    tr = request_class("describe_topic_partitions", 0, "TopicRequest")
    cur = request_class("describe_topic_partitions", 0, "Cursor")
    return conn.request(75, 0, req(topics=tuple(tr(name=n) for n in names), response_partition_limit=limit,
                                   cursor=cur(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None))


def pages(conn: RawConnection, names: list[str], limit: int, cursor: tuple[str, int] | None = None
          ) -> list[list[tuple[str, int | None, int]]]:
    """Every page until no next cursor: per page, (topic, partition or None for an error, error)."""
    out = []
    for _ in range(20):
        resp = describe_topic_partitions(conn, names, limit, cursor)
        out.append([(t.name, int(p.partition_index), int(t.error_code)) for t in resp.topics for p in t.partitions]
                   + [(t.name, None, int(t.error_code)) for t in resp.topics if int(t.error_code)])
        if resp.next_cursor is None:
            return out
        cursor = (resp.next_cursor.topic_name, int(resp.next_cursor.partition_index))
    raise AssertionError("no last page")


def test_describe_topic_partitions_pages_across_three_topics(module_broker: BrokerProcess) -> None:
    stem = unique("zz-dtp")
    a, b, c, missing = f"{stem}-a", f"{stem}-b", f"{stem}-c", f"{stem}-missing"
    with RawConnection(module_broker.bootstrap) as conn:
        for name, n in ((a, 3), (b, 2), (c, 4)):
            assert int(conn.create_topic(name, n).error_code) == 0
        ids = {n: conn.topic_id(n) for n in (a, b, c)}
        # Named topics, in any order, a limit of 4 partitions a page.
        assert pages(conn, [c, missing, a, b], 4) == [
            [(a, 0, 0), (a, 1, 0), (a, 2, 0), (b, 0, 0)],
            [(b, 1, 0), (c, 0, 0), (c, 1, 0), (c, 2, 0)],
            [(c, 3, 0), (missing, None, E.unknown_topic_or_partition)],
        ]
        # A page that ends with a topic's last partition: the next starts at the next topic.
        first = describe_topic_partitions(conn, [a, b], 3)
        assert (first.next_cursor.topic_name, int(first.next_cursor.partition_index)) == (b, 0)
        # Every topic (none named), from a cursor: the topics before it are left out.
        assert pages(conn, [], 5, cursor=(b, 1)) == [
            [(b, 1, 0), (c, 0, 0), (c, 1, 0), (c, 2, 0), (c, 3, 0)]]
        resp = describe_topic_partitions(conn, [a], 2000)
    (t,) = resp.topics
    assert t.topic_id == ids[a] and t.is_internal is False and resp.next_cursor is None
    for p in t.partitions:
        assert int(p.error_code) == 0 and int(p.leader_id) == 0 and int(p.leader_epoch) >= 0
        assert list(p.replica_nodes) == [0] and list(p.isr_nodes) == [0] and list(p.offline_replicas) == []
        assert list(p.eligible_leader_replicas) == [] and list(p.last_known_elr) == []
    # Without an authorizer, every operation a topic has.
    assert int(t.topic_authorized_operations) > 0


ME = "User:ANONYMOUS"


def _acl(name: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, ME, "*", op, AclPermission.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str, str]]:
    """A broker with an authorizer where the anonymous user may describe one topic of two."""
    data: Path = tmp_path_factory.mktemp("dtp-acls")
    seen, hidden = "dtp-seen", "dtp-hidden"
    LocalAclStore(data).add([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, ME, "*",
                                        AclOperation.CREATE, AclPermission.ALLOW),
                             _acl(seen, AclOperation.DESCRIBE), _acl(seen, AclOperation.READ)])
    b = BrokerProcess(data, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                       "auto.create.topics.enable": "false"}).start()
    with RawConnection(b.bootstrap) as conn:
        for name in (seen, hidden):
            assert int(conn.create_topic(name, 2).error_code) == 0
    yield b, seen, hidden
    b.stop()


def test_describe_topic_partitions_checks_describe_on_each_topic(secured: tuple[BrokerProcess, str, str]) -> None:
    broker, seen, hidden = secured
    with RawConnection(broker.bootstrap) as conn:
        named = describe_topic_partitions(conn, [hidden, seen], 100)
        every = describe_topic_partitions(conn, [], 100)
    by_name = {t.name: t for t in named.topics}
    assert int(by_name[hidden].error_code) == E.topic_authorization_failed and by_name[hidden].partitions == ()
    assert int(by_name[seen].error_code) == 0 and len(by_name[seen].partitions) == 2
    # The bit field of what the principal may do on the topic: DESCRIBE (8) and READ (3) only.
    assert int(by_name[seen].topic_authorized_operations) == (1 << int(AclOperation.DESCRIBE)) | (
        1 << int(AclOperation.READ))
    # Asked for every topic, the hidden one is left out as if it did not exist.
    assert [t.name for t in every.topics] == [seen]


def test_kafka_python_pages_through_describe_topic_partitions(module_broker: BrokerProcess) -> None:
    """kafka-python's own DescribeTopicPartitions (KafkaAdminClient.describe_topic_partitions)."""
    from kafka import KafkaAdminClient

    stem = unique("kp-dtp")
    sizes = {f"{stem}-a": 3, f"{stem}-b": 2, f"{stem}-c": 4}
    with RawConnection(module_broker.bootstrap) as conn:
        for name, n in sizes.items():
            assert int(conn.create_topic(name, n).error_code) == 0
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=10000)
    try:
        seen: list[tuple[str, int]] = []
        cursor = None
        for _ in range(10):
            page = admin.describe_topic_partitions(list(sizes), response_partition_limit=4, cursor=cursor)
            assert sum(len(t["partitions"]) for t in page["topics"]) <= 4
            seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    finally:
        admin.close()
    assert seen == [(name, p) for name, n in sizes.items() for p in range(n)]
