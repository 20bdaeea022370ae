"""Authentication meets authorization: the ACL authorizer decides on the principal a SASL login
(or a client certificate) gives the connection, and managing SCRAM users needs the cluster rights
Kafka asks for (ALTER to change, DESCRIBE to list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import RawConnection, request_class, wait_until
from saslraw import login
from sechelpers import Certs, start_secure

from strom.security.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from strom.security.acl_store import LocalAclStore

pytestmark = pytest.mark.timeout(90)


def _allow(principal: str, topic: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", op, AclPermission.ALLOW)


def test_acls_decide_on_the_sasl_principal(certs: Certs, tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    data = tmp_path / "data"
    data.mkdir()
    LocalAclStore(data).add([_allow("User:alice", "acl-t", AclOperation.WRITE),
                             _allow("User:alice", "acl-t", AclOperation.DESCRIBE)])
    # The local PLAINTEXT listener is the administrator's (User:ANONYMOUS is a super user here).
    b = start_secure(certs, data, ("PLAINTEXT", "SASL_PLAINTEXT"), **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS",
        "auto.create.topics.enable": "false",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a" user_bob="b";'})
    try:
        admin = AdminClient({"bootstrap.servers": b.addr["PLAINTEXT"]})
        admin.create_topics([NewTopic("acl-t", 1, 1)])["acl-t"].result(20)

        def produce(name: str, password: str) -> list[object]:
            results: list[object] = []
            p = Producer({"bootstrap.servers": b.addr["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": name, "sasl.password": password,
                          "message.timeout.ms": 10000})
            p.produce("acl-t", name.encode(), on_delivery=lambda err, msg: results.append(err))
            p.flush(15)
            return results

        assert produce("alice", "a") == [None]
        (err,) = produce("bob", "b")
        assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        wait_until(lambda: "DENIED User:bob" in b.log_text(), timeout=5, what="the audit line for bob")

        # SCRAM users: alice may not change them (no ALTER on the cluster); the administrator may.
        up = UserScramCredentialUpsertion("zoe", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"z")
        alice = AdminClient({"bootstrap.servers": b.addr["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "a"})
        with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
            alice.alter_user_scram_credentials([up])["zoe"].result(20)
        with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
            alice.describe_user_scram_credentials(["zoe"])["zoe"].result(20)
        # Listing is refused too. (Checked on the wire: librdkafka 2.16 crashes on the answer, the
        # top-level CLUSTER_AUTHORIZATION_FAILED Kafka also sends.)
        with RawConnection(b.addr["SASL_PLAINTEXT"]) as raw:
            assert login(raw, "PLAIN", "alice", "a").error_code == 0
            req = request_class("describe_user_scram_credentials", 0, "DescribeUserScramCredentialsRequest")
            resp = raw.request(50, 0, req(users=None))
            assert resp.error_code == 31 and resp.results == ()
        admin.alter_user_scram_credentials([up])["zoe"].result(20)
        assert "zoe" in admin.describe_user_scram_credentials().result(20)
    finally:
        b.proc.stop()
