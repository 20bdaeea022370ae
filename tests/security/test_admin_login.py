"""The admin HTTP listener of a broker with SASL: the console and REST API ask for a login, checked
against the broker's SASL users (PLAIN from JAAS, SCRAM stored), served over https; with an
authorizer, each call needs the ACL its Kafka request would, refusals are audited, and an
anonymous request to delete a topic is refused; /metrics needs the login too."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import RawConnection, wait_until
from sechelpers import Certs, SecureBroker, add_scram_user, admin_url, start_admin_broker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def console_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    # User:admin is the operator.
    b = start_admin_broker(certs, tmp_path_factory.mktemp("console") / "data", "https", "User:ANONYMOUS;User:admin")
    try:
        yield b
    finally:
        b.proc.stop()


def call(b: SecureBroker, certs: Certs, method: str, path: str, user: str | None = None,
         password: str = "", body: Any = None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    req = urllib.request.Request(admin_url(b.proc) + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null") if path.startswith("/api") else resp.read()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null") if e.headers.get("Content-Type", "").startswith(
            "application/json") else None


def make_topic(b: SecureBroker, name: str) -> None:
    with RawConnection(b.addr["PLAINTEXT"]) as conn:
        conn.create_topic(name, 1)


def exists(b: SecureBroker, name: str) -> bool:
    with RawConnection(b.addr["PLAINTEXT"]) as conn:
        return any(t.name == name and int(t.error_code) == 0 for t in conn.metadata([name]).topics)


def test_no_login_no_console_but_probes_stay_open(console_broker: SecureBroker, certs: Certs) -> None:
    make_topic(console_broker, "keep-me")
    status, _ = call(console_broker, certs, "GET", "/api/topics")
    assert status == 401
    status, _ = call(console_broker, certs, "DELETE", "/api/topics/keep-me")
    assert status == 401
    assert exists(console_broker, "keep-me")
    for path in ("/healthz", "/readyz"):
        assert call(console_broker, certs, "GET", path)[0] == 200
    assert call(console_broker, certs, "GET", "/metrics")[0] == 401  # it names every topic and group


def test_a_wrong_password_is_refused_and_audited(console_broker: SecureBroker, certs: Certs) -> None:
    status, body = call(console_broker, certs, "GET", "/api/overview", "alice", "not-her-password")
    assert status == 401 and body == {"error": "login required"}
    wait_until(lambda: any("DENIED admin login as User:alice" in line for line in console_broker.proc.log_lines),
               5, what="the audit line")


def test_a_logged_in_user_gets_what_the_acls_allow(console_broker: SecureBroker, certs: Certs) -> None:
    make_topic(console_broker, "alices")
    make_topic(console_broker, "not-alices")
    # alice (a PLAIN user of the JAAS configuration) has no ACL yet: she sees nothing, deletes nothing.
    status, body = call(console_broker, certs, "GET", "/api/topics", "alice", "alice-secret")
    assert status == 200 and [t["name"] for t in body["topics"]] == []
    status, body = call(console_broker, certs, "DELETE", "/api/topics/alices", "alice", "alice-secret")
    assert status == 403 and body["error_code"] == 29
    assert exists(console_broker, "alices")
    console_broker.proc.wait_for_log("DENIED User:alice", "DELETE on TOPIC:alices")
    # Describe and Delete on her topic: she sees it (only it) and deletes it.
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as RT

    admin = AdminClient({"bootstrap.servers": console_broker.addr["PLAINTEXT"]})
    for f in admin.create_acls([AclBinding(RT.TOPIC, "alices", ResourcePatternType.LITERAL, "User:alice", "*", op,
                                           AclPermissionType.ALLOW)
                                for op in (AclOperation.DESCRIBE, AclOperation.DELETE)]).values():
        f.result(20)
    status, body = call(console_broker, certs, "GET", "/api/topics", "alice", "alice-secret")
    assert status == 200 and [t["name"] for t in body["topics"]] == ["alices"]
    assert call(console_broker, certs, "DELETE", "/api/topics/alices", "alice", "alice-secret")[0] == 200
    assert not exists(console_broker, "alices")


def test_a_scram_user_logs_in_and_a_super_user_may_do_anything(console_broker: SecureBroker, certs: Certs) -> None:
    add_scram_user(console_broker.addr["PLAINTEXT"], "carol", "carol-pw")
    status, _ = call(console_broker, certs, "GET", "/api/topics", "carol", "carol-pw")
    assert status == 200
    assert call(console_broker, certs, "GET", "/api/topics", "carol", "wrong")[0] == 401
    make_topic(console_broker, "doomed")
    assert call(console_broker, certs, "DELETE", "/api/topics/doomed", "admin", "admin-secret")[0] == 200
    assert not exists(console_broker, "doomed")


def test_the_console_is_https_only_here(console_broker: SecureBroker) -> None:
    plain = admin_url(console_broker.proc).replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain + "/healthz", timeout=5).read()


def test_a_bad_admin_tls_setting_stops_the_broker_with_one_line(certs: Certs, tmp_path: Any) -> None:
    from brokerproc import BrokerProcess

    b = BrokerProcess(tmp_path, overrides={"admin.listeners": "https://127.0.0.1:0",
                                           "listener.name.admin.ssl.keystore.location": str(tmp_path / "missing.pem"),
                                           "ssl.keystore.type": "PEM"})
    with pytest.raises(RuntimeError) as e:
        b.start(timeout=20)
    assert "listener.name.admin.ssl.keystore.location" in str(e.value)


def test_transactions_need_describe_on_the_id_and_producers_read_on_the_topic(console_broker: SecureBroker,
                                                                              certs: Certs) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as RT
    from txn_helpers import txn_producer

    bs = console_broker.addr["PLAINTEXT"]
    make_topic(console_broker, "bobs-txns")
    producer = txn_producer(bs, "bobs-writer")
    producer.begin_transaction()
    producer.produce("bobs-txns", value=b"x")
    producer.commit_transaction(20)
    login = ("alice", "alice-secret")
    status, body = call(console_broker, certs, "GET", "/api/transactions", *login)
    assert status == 200 and body["transactions"] == []  # listed only to those who may describe it
    status, body = call(console_broker, certs, "GET", "/api/transactions/bobs-writer", *login)
    assert status == 403 and body["error_code"] == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    status, body = call(console_broker, certs, "GET", "/api/topics/bobs-txns/producers", *login)
    assert status == 403 and body["error_code"] == 29
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_acls([
            AclBinding(RT.TRANSACTIONAL_ID, "bobs-writer", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(RT.TOPIC, "bobs-txns", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                       AclPermissionType.ALLOW)]).values():
        f.result(20)
    status, body = call(console_broker, certs, "GET", "/api/transactions", *login)
    assert status == 200 and [t["transactional_id"] for t in body["transactions"]] == ["bobs-writer"]
    assert call(console_broker, certs, "GET", "/api/transactions/bobs-writer", *login)[0] == 200
    status, body = call(console_broker, certs, "GET", "/api/topics/bobs-txns/producers", *login)
    assert status == 200 and len(body["partitions"][0]["producers"]) == 1
