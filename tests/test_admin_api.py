"""The console's REST API (/api/...) against a real broker: topics, create/delete, the message browser
(newest N, from an offset, from a time, compressed batches, headers, null keys), groups, and refusals."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, confluent_produce, wait_until
from test_metrics import HTTP_TIMEOUT, admin_url

from strom.records import codec


def call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def api_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    b = BrokerProcess(tmp_path_factory.mktemp("api") / "data", overrides={"admin.listeners": "http://127.0.0.1:0"}).start()
    try:
        yield b, admin_url(b) + "/api"
    finally:
        b.stop()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_create_list_describe_delete(api_broker: tuple[BrokerProcess, str]) -> None:
    broker, api = api_broker
    status, created = call("POST", api + "/topics", {"name": "rest-made", "partitions": 3,
                                                     "configs": {"retention.ms": "60000"}})
    assert status == 201, created
    assert created["partitions"] == 3 and created["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in created["partition_list"]] == [0, 1, 2]

    # Kafka clients see it.
    with RawConnection(broker.bootstrap) as conn:
        (t,) = conn.metadata(["rest-made"]).topics
        assert int(t.error_code) == 0 and len(t.partitions) == 3
        conn.produce("rest-made", 2, codec.build_batch([(b"k", b"v")] * 4, timestamp_ms=int(time.time() * 1000)))

    status, listing = call("GET", api + "/topics")
    assert status == 200
    (entry,) = [t for t in listing["topics"] if t["name"] == "rest-made"]
    assert entry["messages"] == 4 and entry["records_in"] == 4 and entry["size_bytes"] > 0
    status, one = call("GET", api + "/topics/rest-made")
    assert status == 200
    assert [p["log_end_offset"] for p in one["partition_list"]] == [0, 0, 4]

    assert call("POST", api + "/topics", {"name": "rest-made", "partitions": 1})[0] == 409
    status, err = call("POST", api + "/topics", {"name": "bad/name"})
    assert status == 400 and err["error_code"] == 17
    assert call("POST", api + "/topics", {"name": "x", "configs": {"cleanup.policy": "sometimes"}})[0] == 400
    assert call("POST", api + "/topics", raw=b"{not json")[0] == 400

    assert call("DELETE", api + "/topics/rest-made") == (200, {"deleted": "rest-made"})
    assert call("GET", api + "/topics/rest-made")[0] == 404
    assert call("DELETE", api + "/topics/rest-made")[0] == 404


def test_internal_topics_cannot_be_deleted(api_broker: tuple[BrokerProcess, str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    broker, api = api_broker
    call("POST", api + "/topics", {"name": "for-offsets", "partitions": 1})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "api-internal"})
    try:
        consumer.commit(offsets=[TopicPartition("for-offsets", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    status, body = call("DELETE", api + "/topics/__consumer_offsets")
    assert status == 403 and "internal" in body["error"]


def test_changes_need_same_origin_json(api_broker: tuple[BrokerProcess, str]) -> None:
    _, api = api_broker
    # A cross-site page cannot create or delete topics through the visitor's browser.
    status, _ = call("POST", api + "/topics", {"name": "csrf"}, headers={"Origin": "http://evil.example"})
    assert status == 403
    status, _ = call("POST", api + "/topics", raw=b'{"name": "csrf"}', headers={"Content-Type": "text/plain"})
    assert status == 415
    assert call("GET", api + "/topics/csrf")[0] == 404


def test_message_browser(api_broker: tuple[BrokerProcess, str]) -> None:
    broker, api = api_broker
    assert call("POST", api + "/topics", {"name": "browse", "partitions": 1})[0] == 201
    t0 = int(time.time() * 1000) - 100_000
    with RawConnection(broker.bootstrap) as conn:
        # 0..9 plain, one record per second of t0 + i; then 10..14 in one zstd batch with headers.
        for i in range(10):
            batch = codec.build_batch([(f"k{i}".encode(), f"v{i}".encode())], timestamp_ms=t0 + i * 1000)
            assert int(conn.produce("browse", 0, batch).error_code) == 0
        recs = [(None, json.dumps({"n": i}).encode(), [("trace", f"t{i}".encode()), ("empty", None)])
                for i in range(10, 15)]
        batch = codec.build_batch(recs, timestamp_ms=t0 + 20_000, codec=codec.ZSTD)
        assert int(conn.produce("browse", 0, batch).error_code) == 0

    url = api + "/topics/browse/messages?partition=0"
    status, newest = call("GET", url + "&limit=3")
    assert status == 200
    assert [r["offset"] for r in newest["records"]] == [12, 13, 14]
    assert newest["high_watermark"] == 15 and newest["next_offset"] == 15
    last = newest["records"][-1]
    assert last["key"] is None and last["key_size"] == -1
    assert json.loads(base64.b64decode(last["value"])) == {"n": 14}
    assert last["headers"] == [{"key": "trace", "value": b64(b"t14")}, {"key": "empty", "value": None}]
    assert last["timestamp_type"] == "CreateTime" and last["timestamp"] == t0 + 20_000

    status, page = call("GET", url + "&offset=4&limit=3")
    assert [(r["offset"], base64.b64decode(r["value"])) for r in page["records"]] == \
        [(4, b"v4"), (5, b"v5"), (6, b"v6")]
    assert page["records"][0]["key"] == b64(b"k4")
    # From inside the compressed batch: records before the offset are not returned.
    status, page = call("GET", url + "&offset=11&limit=2")
    assert [r["offset"] for r in page["records"]] == [11, 12]

    status, by_time = call("GET", url + f"&timestamp={t0 + 6500}&limit=2")
    assert [r["offset"] for r in by_time["records"]] == [7, 8]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((t0 + 8000) // 1000)) + "Z"
    status, by_iso = call("GET", url + f"&timestamp={iso}&limit=1")
    # The second that holds t0 + 8000 starts after record 7's time (t0 + 7000): record 8 comes first.
    assert status == 200 and [r["offset"] for r in by_iso["records"]] == [8]
    status, future = call("GET", url + f"&timestamp={t0 + 10**9}")
    assert status == 200 and future["records"] == []

    assert call("GET", api + "/topics/browse/messages?partition=5")[0] == 404
    assert call("GET", api + "/topics/nope/messages")[0] == 404
    assert call("GET", url + "&offset=abc")[0] == 400
    assert call("GET", url + "&timestamp=yesterday")[0] == 400


def test_groups(api_broker: tuple[BrokerProcess, str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    broker, api = api_broker
    call("POST", api + "/topics", {"name": "grouped", "partitions": 2})
    confluent_produce(broker.bootstrap, "grouped", [{"value": b"x", "partition": i % 2} for i in range(9)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "api-readers"})
    try:
        consumer.commit(offsets=[TopicPartition("grouped", 0, 1), TopicPartition("grouped", 1, 4)],
                        asynchronous=False)
    finally:
        consumer.close()
    listing = wait_until(lambda: [g for g in call("GET", api + "/groups")[1]["groups"] if g["group_id"] == "api-readers"],
                         10, what="the group in /api/groups")
    assert listing[0]["lag"] == (5 - 1) + (4 - 4) and listing[0]["topics"] == ["grouped"]
    status, group = call("GET", api + "/groups/api-readers")
    assert status == 200 and group["state"] == "Empty" and group["member_list"] == []
    assert [(o["partition"], o["committed"], o["end_offset"], o["lag"]) for o in group["offsets"]] == \
        [(0, 1, 5, 4), (1, 4, 4, 0)]
    assert call("GET", api + "/groups/no-such-group")[0] == 404
    assert group["type"] == "classic" and group["group_epoch"] is None


def test_consumer_protocol_group(api_broker: tuple[BrokerProcess, str]) -> None:
    """A KIP-848 group: a member driven by hand owns all four partitions and has not yet heard of the
    confluent-kafka member (group.protocol=consumer) that joined since: the API shows the epochs, each
    member's assignment against its target, what is to be revoked and what to be assigned."""
    import uuid

    from confluent_kafka import Consumer
    from test_groups_cli import join_by_hand

    broker, api = api_broker
    call("POST", api + "/topics", {"name": "kip848", "partitions": 4})
    member_id = str(uuid.uuid4())
    with RawConnection(broker.bootstrap, client_id="by-hand") as conn:
        e1 = join_by_hand(conn, "api-kip848", member_id, "kip848", 4)
        joiner = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "api-kip848", "client.id": "joiner",
                           "group.protocol": "consumer"})
        try:
            joiner.subscribe(["kip848"])

            def pending() -> Any:
                joiner.poll(0.1)
                g = call("GET", api + "/groups/api-kip848")[1]
                return g if g["group_epoch"] > e1 else None

            g = wait_until(pending, 30, interval=0, what="the joiner in the group")
            listed = [x for x in call("GET", api + "/groups")[1]["groups"] if x["group_id"] == "api-kip848"]
        finally:
            joiner.close()
    assert (g["type"], g["state"], g["protocol"], g["members"]) == ("consumer", "Reconciling", "uniform", 2)
    assert g["assignment_epoch"] == g["group_epoch"]
    members = {m["client_id"]: m for m in g["member_list"]}
    hand, new = members["by-hand"], members["joiner"]
    assert (hand["member_id"], hand["member_epoch"], hand["subscribed_topic_names"]) == (member_id, e1, ["kip848"])
    assert hand["assignment"] == [{"topic": "kip848", "partitions": [0, 1, 2, 3]}]
    assert new["member_epoch"] == g["group_epoch"] and new["assignment"] == []
    moving = new["target_assignment"][0]["partitions"]
    assert len(moving) == 2 and new["to_assign"] == [{"topic": "kip848", "partitions": moving}]
    assert hand["to_revoke"] == [{"topic": "kip848", "partitions": moving}] and hand["to_assign"] == []
    assert [(x["type"], x["members"], x["group_epoch"]) for x in listed] == [("consumer", 2, g["group_epoch"])]


def test_cluster_of_one(api_broker: tuple[BrokerProcess, str]) -> None:
    """A single broker is its own controller; every partition is led by it with an ISR of itself."""
    broker, api = api_broker
    assert call("POST", api + "/topics", {"name": "rest-solo", "partitions": 2})[0] == 201
    status, c = call("GET", api + "/cluster")
    assert status == 200
    assert c["brokers"] == [{"id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None, "controller": True,
                             "self": True}]
    assert c["controller_id"] == 0 and c["broker_id"] == 0 and c["cluster_id"]
    assert c["partitions"] >= 2
    assert c["under_replicated_partitions"] == [] and c["offline_partitions"] == []
    status, t = call("GET", api + "/topics/rest-solo")
    assert status == 200
    assert t["replication_factor"] == 1 and t["under_replicated_partitions"] == 0 and t["offline_partitions"] == 0
    for p in t["partition_list"]:
        assert (p["leader"], p["replicas"], p["isr"], p["offline_replicas"]) == (0, [0], [0], [])
        assert p["under_replicated"] is False and p["offline"] is False
    status, ov = call("GET", api + "/overview")
    assert ov["cluster"] == {"brokers": 1, "controller_id": 0, "under_replicated_partitions": 0,
                             "offline_partitions": 0}


def test_overview(api_broker: tuple[BrokerProcess, str]) -> None:
    broker, api = api_broker
    status, ov = call("GET", api + "/overview")
    assert status == 200
    assert ov["broker"]["ready"] is True and ov["broker"]["port"] == broker.port
    assert ov["broker"]["listeners"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    assert ov["connections"] >= 0 and ov["partitions"] >= ov["topics"]
    assert ov["history"] and len(ov["history"][-1]) == 5


def test_transactions_producers_and_hanging(api_broker: tuple[BrokerProcess, str]) -> None:
    from txn_helpers import forge_hanging_transaction, txn_producer

    broker, api = api_broker
    assert call("POST", api + "/topics", {"name": "txn-rest", "partitions": 2})[0] == 201
    done = txn_producer(broker.bootstrap, "api-done")
    done.begin_transaction()
    done.produce("txn-rest", value=b"c", partition=0)
    done.commit_transaction(20)
    live = txn_producer(broker.bootstrap, "api-live", **{"transaction.timeout.ms": 60_000})
    live.begin_transaction()
    live.produce("txn-rest", value=b"open", partition=1)
    assert live.flush(10) == 0
    ghost = forge_hanging_transaction(broker.bootstrap, "txn-rest", 0, producer_id=987_654)
    try:
        status, d = call("GET", api + "/transactions")
        assert status == 200
        by_id = {t["transactional_id"]: t for t in d["transactions"]}
        assert d["transactions"][0]["transactional_id"] == "api-live"  # open ones first
        t = by_id["api-live"]
        assert t["open"] and t["state"] == "Ongoing" and t["timeout_ms"] == 60_000
        assert t["partitions"] == [{"topic": "txn-rest", "partition": 1}]
        assert t["start_time"] > 0 and 0 <= t["age_ms"] < 60_000
        assert by_id["api-done"]["state"] == "CompleteCommit" and not by_id["api-done"]["open"]
        assert by_id["api-done"]["age_ms"] is None and by_id["api-done"]["partitions"] == []
        assert d["counters"]["committed"] >= 1 and d["max_timeout_ms"] == 900_000 and d["coordinates_all"]
        # Only the forged transaction hangs: the live one is known to the coordinator and young.
        (h,) = d["hanging"]
        assert (h["topic"], h["partition"], h["producer_id"], h["start_offset"]) == ("txn-rest", 0, 987_654, ghost)
        assert h["age_ms"] >= 3_600_000 and h["transactional_id"] is None
        assert h["reasons"] == ["older than transaction.max.timeout.ms",
                                "no ongoing transaction of this producer at the coordinator"]

        status, one = call("GET", api + "/transactions/api-live")
        assert status == 200 and one == {**t, "age_ms": one["age_ms"]}
        status, err = call("GET", api + "/transactions/nobody")
        assert status == 404 and err["error_code"] == 105

        status, p = call("GET", api + "/topics/txn-rest/producers")
        assert status == 200
        parts = {x["partition"]: x for x in p["partitions"]}
        assert parts[0]["last_stable_offset"] == ghost < parts[0]["high_watermark"]
        assert {pr["producer_id"]: pr["current_txn_start_offset"] for pr in parts[0]["producers"]}[987_654] == ghost
        (lp,) = parts[1]["producers"]
        assert lp["current_txn_start_offset"] == 0 and lp["producer_id"] == t["producer_id"]
        assert parts[1]["last_stable_offset"] == 0
        assert call("GET", api + "/topics/no-such-topic/producers")[0] == 404
    finally:
        live.commit_transaction(20)
    # EndTxn is answered once PrepareCommit is written; CompleteCommit follows the markers.
    wait_until(lambda: [t["state"] for t in call("GET", api + "/transactions")[1]["transactions"]
                        if t["transactional_id"] == "api-live"] == ["CompleteCommit"], 10, what="api-live complete")
