"""Every security setting is honoured or refused at start with one line naming the key: never a
broker that serves less than was asked (the old behaviour: plaintext on an SSL or SASL port)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sechelpers import PLAIN_JAAS, Certs

from strom.config import BrokerConfig, ConfigError
from strom.security import listener as listener_security

pytestmark = pytest.mark.timeout(60)


def _build(**props: str) -> dict[str, listener_security.ListenerSecurity]:
    return listener_security.build(BrokerConfig.load(None, props))


def _ssl(certs: Certs, **more: str) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
            **more}


def _sasl(**more: str) -> dict[str, str]:
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **more}


def test_valid_settings_build(certs: Certs) -> None:
    sec = _build(**_ssl(certs, **{"ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"}))
    assert sec["SSL"].ssl_context is not None and not sec["SSL"].uses_sasl
    sasl = _build(**_sasl())["SASL_PLAINTEXT"]
    assert sasl.mechanisms == ("PLAIN",) and sasl.plain_users == {"alice": "alice-secret", "admin": "admin-secret"}
    assert (sasl.reauth_ms, sasl.max_receive) == (0, 524288)
    per_listener = _build(**_sasl(**{"connections.max.reauth.ms": "60000",
                                     "listener.name.sasl_plaintext.connections.max.reauth.ms": "5000"}))
    assert per_listener["SASL_PLAINTEXT"].reauth_ms == 5000
    # Inline PEM (ssl.keystore.certificate.chain + ssl.keystore.key) instead of a file.
    leaf = certs.ca_obj.issue_cert("127.0.0.1")
    chain = "".join(b.bytes().decode() for b in leaf.cert_chain_pems)
    key = leaf.private_key_pem.bytes().decode()
    assert _build(**{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                     "ssl.keystore.certificate.chain": chain, "ssl.keystore.key": key})["SSL"].ssl_context


def _refused(key: str, **props: str) -> str:
    with pytest.raises(ConfigError) as e:
        _build(**props)
    assert e.value.key == key, str(e.value)
    assert "\n" not in str(e.value)
    return e.value.reason


def test_refusals(certs: Certs, tmp_path: Path) -> None:
    bad_pem = tmp_path / "bad.pem"
    bad_pem.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n"
                       "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    ssl_no_type = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(certs.server)}
    assert "JKS is not supported" in _refused("ssl.keystore.type", **ssl_no_type)
    _refused("ssl.keystore.type", **_ssl(certs, **{"ssl.keystore.type": "PKCS12"}))
    _refused("ssl.keystore.location", listeners="SSL://127.0.0.1:0")  # no certificate at all
    _refused("ssl.keystore.location", **_ssl(certs, **{"ssl.keystore.location": str(tmp_path / "missing.pem")}))
    _refused("ssl.keystore.location", **_ssl(certs, **{"ssl.keystore.location": str(bad_pem)}))
    _refused("ssl.keystore.location", **_ssl(certs, **{"ssl.keystore.location": str(certs.ca)}))  # no key
    _refused("ssl.enabled.protocols", **_ssl(certs, **{"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}))
    _refused("ssl.protocol", **_ssl(certs, **{"ssl.protocol": "SSLv3"}))
    _refused("ssl.cipher.suites", **_ssl(certs, **{"ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"}))
    _refused("ssl.cipher.suites", **_ssl(certs, **{"ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "NOPE"}))
    _refused("ssl.truststore.location", **_ssl(certs, **{"ssl.client.auth": "required"}))
    _refused("ssl.truststore.type", **_ssl(certs, **{"ssl.client.auth": "required",
                                                     "ssl.truststore.location": str(certs.ca)}))
    _refused("listener.name.ssl.ssl.keystore.location",
             **_ssl(certs, **{"listener.name.ssl.ssl.keystore.location": str(tmp_path / "x.pem")}))
    _refused("listener.name.ssl.ssl.principal.mapping.rules",
             **_ssl(certs, **{"listener.name.ssl.ssl.principal.mapping.rules": "RULE:broken"}))
    # SASL: Kafka's default mechanism (GSSAPI) and the others strom lacks; no users for PLAIN.
    _refused("sasl.enabled.mechanisms", listeners="SASL_PLAINTEXT://127.0.0.1:0")
    _refused("sasl.enabled.mechanisms", **_sasl(**{"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}))
    _refused("listener.name.sasl_plaintext.sasl.enabled.mechanisms",
             **_sasl(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": ""}))
    _refused("listener.name.sasl_plaintext.plain.sasl.jaas.config", listeners="SASL_PLAINTEXT://127.0.0.1:0",
             **{"sasl.enabled.mechanisms": "PLAIN"})
    _refused("listener.name.sasl_plaintext.plain.sasl.jaas.config", **_sasl(**{
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": "org.apache.kafka.common.security.scram."
                                                                "ScramLoginModule required;"}))
    _refused("sasl.jaas.config", listeners="SASL_PLAINTEXT://127.0.0.1:0",
             **{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "PlainLoginModule required user_a=1"})
    _refused("listener.name.sasl_plaintext.connections.max.reauth.ms",
             **_sasl(**{"listener.name.sasl_plaintext.connections.max.reauth.ms": "soon"}))
    _refused("principal.builder.class", **_sasl(**{"principal.builder.class": "com.example.Builder"}))
    _refused("zookeeper.ssl.client.enable", **_sasl(**{"zookeeper.ssl.client.enable": "true"}))
    _refused("zookeeper.set.acl", **_sasl(**{"zookeeper.set.acl": "true"}))


def test_sasl_jaas_config_without_listener_prefix() -> None:
    sec = _build(listeners="SASL_PLAINTEXT://127.0.0.1:0", **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                                                              "sasl.jaas.config": PLAIN_JAAS})
    assert sec["SASL_PLAINTEXT"].plain_users["alice"] == "alice-secret"


@pytest.mark.parametrize("overrides", [
    {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"},  # the reported case: used to serve plaintext
    {"listeners": "SSL://127.0.0.1:0"},
])
def test_broker_process_refuses_with_one_line(tmp_path: Path, overrides: dict[str, str]) -> None:
    cmd = [sys.executable, "-m", "strom.cli.main", "broker", "--override", f"log.dirs={tmp_path / 'data'}",
           "--override", "admin.listeners="]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("strom: ")]
    assert len(errors) == 1 and "invalid config" in errors[0], proc.stderr
    assert "ready" not in proc.stderr + proc.stdout
    assert not (tmp_path / "data").exists()  # refused before touching the disk


def test_inter_broker_login_is_checked_at_start(certs: Certs) -> None:
    from strom.security.client import inter_broker

    base = {"zookeeper.connect": "127.0.0.1:2181", "listeners": "INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL", "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512"}

    def refused(key: str, **more: str) -> None:
        with pytest.raises(ConfigError) as e:
            inter_broker(BrokerConfig.load(None, {**base, **more}))
        assert e.value.key == key, str(e.value)

    refused("sasl.mechanism.inter.broker.protocol")  # Kafka's default, GSSAPI
    refused("sasl.mechanism.inter.broker.protocol", **{"sasl.mechanism.inter.broker.protocol": "PLAIN"})
    refused("listener.name.internal.scram-sha-512.sasl.jaas.config",
            **{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})
    ok = inter_broker(BrokerConfig.load(None, {
        **base, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="b" password="p";'}))
    assert (ok.protocol, ok.mechanism, ok.username, ok.password) == ("SASL_SSL", "SCRAM-SHA-512", "b", "p")
    assert ok.ssl_context is not None and ok.ssl_context.check_hostname


def test_encrypted_private_key_with_ssl_key_password(certs: Certs, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    leaf = certs.ca_obj.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-secret"))
    path = tmp_path / "encrypted.pem"
    path.write_bytes(encrypted + b"".join(b.bytes() for b in leaf.cert_chain_pems))
    props = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)}
    assert _build(**props, **{"ssl.key.password": "key-secret"})["SSL"].ssl_context is not None
    _refused("ssl.key.password", **props, **{"ssl.key.password": "wrong"})
    _refused("ssl.key.password", **props)  # encrypted, and no password given
