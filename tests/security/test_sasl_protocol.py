"""The SASL listener at the protocol level: what may be sent before authentication, failures,
re-authentication (KIP-368), the v0 handshake with bare tokens, and bad input that must close only
its own connection."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import scramp
from helpers import ConnectionClosed, RawConnection, ms, request_class, values_batch, wait_until
from saslraw import authenticate, handshake, login, plain_token
from sechelpers import Certs, SecureBroker, add_scram_user, start_secure

from strom.security.scram import ScramCredential

pytestmark = pytest.mark.timeout(60)

REAUTH_MS = 1500


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    b = start_secure(certs, tmp_path_factory.mktemp("sasl") / "data", ("PLAINTEXT", "SASL_PLAINTEXT"),
                     **{"connections.max.reauth.ms": str(REAUTH_MS)})
    add_scram_user(b.addr["PLAINTEXT"], "dave", "dave-secret")
    try:
        yield b
    finally:
        b.proc.stop()


def _produce_request(topic: str) -> tuple[int, int, object]:
    req = request_class("produce", 9, "ProduceRequest")
    tdata = request_class("produce", 9, "TopicProduceData")
    pdata = request_class("produce", 9, "PartitionProduceData")
    records = values_batch([b"sneaky"])
    return 0, 9, req(transactional_id=None, acks=1, timeout=ms(1000), topic_data=(
        tdata(name=topic, partition_data=(pdata(index=0, records=records),)),))


def _log_end(b: SecureBroker, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.addr["PLAINTEXT"], "group.id": "x"})
    try:
        md = c.list_topics(topic, timeout=10)
        if md.topics[topic].error is not None:
            return 0
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


@pytest.mark.parametrize("request_kind", ["produce", "fetch", "metadata"])
def test_unauthenticated_requests_close_the_connection(broker: SecureBroker, request_kind: str) -> None:
    topic = "guarded"
    with RawConnection(broker.addr["PLAINTEXT"]) as admin:  # the topic exists, with nothing in it
        admin.metadata([topic], auto_create=True)
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert c.api_versions().error_code == 0  # allowed before authentication
        if request_kind == "produce":
            c.send(*_produce_request(topic))
        elif request_kind == "fetch":
            freq = request_class("fetch", 4, "FetchRequest")
            c.send(1, 4, freq(replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                              topics=()))
        else:
            c.send(3, 12, request_class("metadata", 12, "MetadataRequest")(
                topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        with pytest.raises(ConnectionClosed):
            c.read_frame()  # closed without an answer
    assert _log_end(broker, topic) == 0
    wait_until(lambda: "before SASL authentication on listener SASL_PLAINTEXT" in broker.log_text(), timeout=5,
               what="the close in the broker's log")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_gets_sasl_authentication_failed_and_a_close(broker: SecureBroker, mechanism: str) -> None:
    user = "alice" if mechanism == "PLAIN" else "dave"
    messages = []
    for who, password in ((user, "wrong"), ("nobody", "wrong")):
        with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
            resp = login(c, mechanism, who, password)
            assert resp.error_code == 58  # SASL_AUTHENTICATION_FAILED
            messages.append(resp.error_message)
            assert c.wait_closed(5)
    # A wrong password and an unknown user read the same: no hint which part was wrong.
    assert messages[0] == messages[1] and "password" not in messages[0].lower()
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        good = login(c, mechanism, user, f"{user}-secret")
        assert good.error_code == 0
        assert c.metadata(None).brokers  # served once authenticated


@dataclass(frozen=True)
class ScramAttempt:
    salt: bytes
    iterations: int
    error_code: int  # of the final SaslAuthenticate
    error_message: str | None
    closed: bool


def _scram_attempt(broker: SecureBroker, mechanism: str, user: str, password: str) -> ScramAttempt:
    """The whole exchange in raw frames: what the server-first message shows, then how it ends."""
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert handshake(c, mechanism).error_code == 0
        client = scramp.ScramClient([mechanism], user, password)
        first = authenticate(c, client.get_client_first().encode())
        assert first.error_code == 0, first  # nothing told yet, known user or not
        server_first = first.auth_bytes.decode()
        client.set_server_first(server_first)
        final = authenticate(c, client.get_client_final().encode())
        fields = dict(f.split("=", 1) for f in server_first.split(","))
        return ScramAttempt(base64.b64decode(fields["s"]), int(fields["i"]), final.error_code, final.error_message,
                            c.wait_closed(5))


def test_unknown_scram_user_looks_like_a_real_one_until_the_proof(broker: SecureBroker) -> None:
    """The server-first message of a user that does not exist has the salt length and iteration count
    of a real user's, and the same salt on every try; the login then fails as a wrong password does."""
    salts: dict[tuple[str, str], bytes] = {}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        real = _scram_attempt(broker, mechanism, "dave", "wrong")  # dave: made by librdkafka's AdminClient
        ghost = _scram_attempt(broker, mechanism, "ghost", "wrong")
        again = _scram_attempt(broker, mechanism, "ghost", "other")
        assert ghost.salt == again.salt and ghost.iterations == again.iterations
        assert (len(ghost.salt), ghost.iterations) == (len(real.salt), real.iterations) == (64, 4096)
        # The credentials strom makes itself (`strom users add --zookeeper`) have that shape too.
        made = ScramCredential.from_password(mechanism, "pw")
        assert (len(made.salt), made.iterations) == (len(real.salt), real.iterations)
        for attempt in (real, ghost, again):
            assert (attempt.error_code, attempt.error_message, attempt.closed) == \
                (58, real.error_message, True)  # SASL_AUTHENTICATION_FAILED, the same words, closed
        salts[mechanism, "ghost"] = ghost.salt
        salts[mechanism, "ghost-2"] = _scram_attempt(broker, mechanism, "ghost-2", "x").salt
    # Salts differ between names and between mechanisms, as real users' do.
    assert len(set(salts.values())) == 4
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert login(c, "SCRAM-SHA-512", "dave", "dave-secret").error_code == 0


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(broker: SecureBroker) -> None:
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        resp = handshake(c, "GSSAPI")
        assert resp.error_code == 33 and set(resp.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert c.wait_closed(5)


def test_session_expires_and_reauthentication_on_the_same_connection(broker: SecureBroker) -> None:
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        resp = login(c, "SCRAM-SHA-512", "dave", "dave-secret")
        assert resp.error_code == 0 and resp.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert c.metadata(None).brokers
        time.sleep(REAUTH_MS / 1000 * 0.5)
        # KIP-368: a new handshake on the authenticated connection, before the session ends.
        assert login(c, "SCRAM-SHA-512", "dave", "dave-secret").error_code == 0
        time.sleep(REAUTH_MS / 1000 * 0.7)  # past the first session's end, within the second's
        assert c.metadata(None).brokers
        # Re-authenticating as someone else is refused.
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 58
        assert c.wait_closed(5)
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        time.sleep(REAUTH_MS / 1000 + 0.3)
        c.send(3, 12, request_class("metadata", 12, "MetadataRequest")(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        with pytest.raises(ConnectionClosed):
            c.read_frame()  # expired without re-authenticating: closed, not served


def test_v0_handshake_then_bare_tokens(broker: SecureBroker) -> None:
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert handshake(c, "PLAIN", version=0).error_code == 0
        token = plain_token("alice", "alice-secret")
        c.send_bytes(struct.pack(">i", len(token)) + token)
        assert c.read_frame() == b""  # PLAIN's (empty) answer, as a bare frame
        assert c.metadata(None).brokers


def test_bad_input_closes_only_that_connection(broker: SecureBroker) -> None:
    bystander = RawConnection(broker.addr["SASL_PLAINTEXT"])
    assert login(bystander, "PLAIN", "alice", "alice-secret").error_code == 0
    cases: list[bytes] = [
        struct.pack(">i", 2_000_000_000),  # an absurd length before authentication
        struct.pack(">i", 600_000) + b"x" * 100,  # over sasl.server.max.receive.size
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64,  # a TLS hello on a plaintext port
    ]
    for data in cases:
        with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
            c.send_bytes(data)
            assert c.wait_closed(5), data[:12]
    # Truncated and garbled SASL tokens.
    for mechanism, token in (("PLAIN", b"\0alice"), ("SCRAM-SHA-512", b"n,,n=dave"),
                             ("SCRAM-SHA-512", b"\xff\xfe\x00garbage"), ("PLAIN", b"")):
        with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
            assert handshake(c, mechanism).error_code == 0
            assert authenticate(c, token).error_code == 58
            assert c.wait_closed(5)
    # SaslAuthenticate without a handshake; a second handshake in the middle of an exchange.
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert authenticate(c, plain_token("alice", "alice-secret")).error_code == 34  # ILLEGAL_SASL_STATE
        assert c.wait_closed(5)
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert handshake(c, "SCRAM-SHA-512").error_code == 0
        assert handshake(c, "SCRAM-SHA-512").error_code == 34
        assert c.wait_closed(5)
    # The broker and the authenticated bystander are unaffected.
    assert bystander.metadata(None).brokers
    bystander.close()
    assert broker.proc.alive()


def test_librdkafka_reauthenticates_by_itself(broker: SecureBroker) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.addr["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dave", "sasl.password": "dave-secret",
                  "linger.ms": 5})
    errors: list[object] = []
    log_from = len(broker.proc.log_lines)
    end = time.monotonic() + 3 * REAUTH_MS / 1000  # three sessions long
    sent = 0
    while time.monotonic() < end:
        p.produce("reauth", b"x", on_delivery=lambda err, msg: err is not None and errors.append(err))
        sent += 1
        p.poll(0.05)
    assert p.flush(15) == 0 and not errors, errors[:3]
    # KIP-368 on the same connections: none was closed for an expired session.
    assert not [line for line in broker.proc.log_lines[log_from:] if "SASL session expired" in line]


def test_reauthentication_may_not_switch_mechanism(broker: SecureBroker) -> None:
    """KIP-368: a connection re-authenticates with the mechanism it first used, even as the same user
    (SCRAM-SHA-512 then SCRAM-SHA-256 as dave): refused, then closed, as Kafka does."""
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:
        assert login(c, "SCRAM-SHA-512", "dave", "dave-secret").error_code == 0
        resp = login(c, "SCRAM-SHA-256", "dave", "dave-secret")
        assert resp.error_code == 58 and "SCRAM-SHA-512" in (resp.error_message or ""), resp
        assert c.wait_closed(5)
    with RawConnection(broker.addr["SASL_PLAINTEXT"]) as c:  # the same mechanism again is fine
        assert login(c, "SCRAM-SHA-256", "dave", "dave-secret").error_code == 0
        assert login(c, "SCRAM-SHA-256", "dave", "dave-secret").error_code == 0
        assert c.metadata(None).brokers
