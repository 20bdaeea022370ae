"""Real clients over each security protocol against one broker with a listener of each kind:
confluent-kafka and kafka-python over SASL_SSL with SCRAM-SHA-512, aiokafka over SASL_PLAINTEXT
with PLAIN, kcat over SSL, a wrong password refused, and mutual TLS naming the principal."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import uuid

import pytest
from helpers import wait_until
from sechelpers import Certs, SecureBroker, add_scram_user

pytestmark = pytest.mark.timeout(120)

KCAT = "/usr/bin/kcat"


@pytest.fixture(scope="module")
def scram_user(secure_broker: SecureBroker) -> tuple[str, str]:
    add_scram_user(secure_broker.addr["PLAINTEXT"], "carol", "carol-secret")
    return "carol", "carol-secret"


def _confluent(b: SecureBroker, certs: Certs, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": b.addr["SASL_SSL"], "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(certs.ca)}


def test_confluent_kafka_sasl_ssl_scram_sha_512(secure_broker: SecureBroker, certs: Certs,
                                                  scram_user: tuple[str, str]) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"ck-{uuid.uuid4().hex[:6]}"
    conf = _confluent(secure_broker, certs, *scram_user)
    p = Producer(conf)
    for i in range(50):
        p.produce(topic, f"v{i}".encode(), key=b"k")
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": "ck", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.value() for m in c.consume(50, 0.5) if not m.error()) or len(got) >= 50,
                   timeout=40, what="records over SASL_SSL")
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(50)]
    wait_until(lambda: "authenticated as User:carol" in secure_broker.log_text(), timeout=5, what="the login logged")


def test_kafka_python_sasl_ssl_scram_sha_512(secure_broker: SecureBroker, certs: Certs,
                                               scram_user: tuple[str, str]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    common = {"bootstrap_servers": secure_broker.addr["SASL_SSL"], "security_protocol": "SASL_SSL",
              "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": scram_user[0],
              "sasl_plain_password": scram_user[1], "ssl_cafile": str(certs.ca)}
    p = KafkaProducer(**common)
    for i in range(20):
        p.send(topic, f"kp{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", **common)
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.value for ms in c.poll(500).values() for m in ms) or len(got) >= 20,
                   timeout=30, what="records over SASL_SSL")
    finally:
        c.close()
    assert got == [f"kp{i}".encode() for i in range(20)]


def test_aiokafka_sasl_plaintext_plain(secure_broker: SecureBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = f"aio-{uuid.uuid4().hex[:6]}"
    common = {"bootstrap_servers": secure_broker.addr["SASL_PLAINTEXT"], "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**common)
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < 20:
                batch = await c.getmany(timeout_ms=1000)
                got += [m.value for ms in batch.values() for m in ms]
        finally:
            await c.stop()
        return got

    assert asyncio.run(asyncio.wait_for(run(), 60)) == [f"a{i}".encode() for i in range(20)]


def test_kcat_over_ssl(secure_broker: SecureBroker, certs: Certs) -> None:
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    ssl_args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca}"]
    bs = secure_broker.addr["SSL"]
    subprocess.run([KCAT, "-P", "-b", bs, "-t", topic, *ssl_args], input="one\ntwo\nthree\n", text=True,
                   check=True, timeout=30, capture_output=True)
    out = subprocess.run([KCAT, "-C", "-b", bs, "-t", topic, "-e", "-q", "-J", "-o", "beginning", *ssl_args],
                         text=True, check=True, timeout=30, capture_output=True).stdout
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["one", "two", "three"]


def test_wrong_password_is_refused(secure_broker: SecureBroker, certs: Certs, scram_user: tuple[str, str]) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError] = []
    conf = {**_confluent(secure_broker, certs, scram_user[0], "not-the-password"), "error_cb": errors.append,
            "reconnect.backoff.ms": 1000}
    p = Producer(conf)
    # librdkafka hands the broker's SASL_AUTHENTICATION_FAILED message to the application.
    wait_until(lambda: p.poll(0.2) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
               timeout=10, what="an authentication error")
    text = next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "invalid credentials" in text and "not-the-password" not in text
    # (The broker's log reaches the test through a pipe and a thread: wait for it.)
    wait_until(lambda: "SASL authentication failed on listener SASL_SSL" in secure_broker.log_text(), timeout=5,
               what="the refusal in the broker's log")


def test_mutual_tls_maps_the_certificate_to_a_principal(secure_broker: SecureBroker, certs: Certs) -> None:
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": secure_broker.addr["MTLS"], "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key)}
    assert AdminClient(conf).list_topics(timeout=10).brokers
    # The broker says who the connection is: the subject DN as Kafka's DEFAULT rule gives it.
    wait_until(lambda: "on listener MTLS authenticated as User:CN=client,OU=eng,O=x" in secure_broker.log_text(),
               timeout=5, what="the principal in the broker's log")

    # Without a certificate the handshake is refused (ssl.client.auth=required).
    ctx = ssl.create_default_context(cafile=str(certs.ca))

    host, port = secure_broker.addr["MTLS"].split(":")
    # TLS 1.3: the refusal arrives with the first read after the handshake.
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        tls.sendall(b"\0\0\0\0")
        if not tls.recv(1):
            raise ConnectionError("closed")


def test_garbage_instead_of_a_tls_hello(secure_broker: SecureBroker, certs: Certs) -> None:
    from helpers import RawConnection

    for listener in ("SSL", "SASL_SSL"):
        for data in (b"\0\0\0\x0c\0\x12\0\x03\0\0\0\x01\0\0\0\0",  # a plaintext Kafka request
                     b"\x16\x03\x01\xff\xff" + b"\xab" * 300,  # a TLS record header, then junk
                     b"GET / HTTP/1.1\r\n\r\n"):
            with RawConnection(secure_broker.addr[listener]) as c:
                c.send_bytes(data)
                assert c.wait_closed(12), (listener, data[:8])
    # Others are still served.
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": secure_broker.addr["SSL"], "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    assert AdminClient(conf).list_topics(timeout=10).brokers
    assert secure_broker.proc.alive()
