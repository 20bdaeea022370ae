"""The client side: ``strom`` commands, ``strom bench`` and the Spark source's options take the usual
client security properties (-X / kafka.*), Java-style ones included; ``strom users`` manages SCRAM
users, which survive a restart of a single broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sechelpers import Certs, SecureBroker, start_secure

from strom.security.client_properties import librdkafka_properties
from strom.spark.options import OptionError, source_options

pytestmark = pytest.mark.timeout(120)


def strom(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def _sasl_ssl(b: SecureBroker, certs: Certs, user: str, password: str, java_style: bool = False) -> list[str]:
    if java_style:  # as copied from a Kafka client.properties
        props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                 "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                     f'username="{user}" password="{password}";',
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    else:
        props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                 "sasl.password": password, "ssl.ca.location": str(certs.ca)}
    out = ["-b", b.addr["SASL_SSL"]]
    for k, v in props.items():
        out += ["-X", f"{k}={v}"]
    return out


def test_users_commands_and_secured_cli_and_bench(certs: Certs, tmp_path: Path) -> None:
    b = start_secure(certs, tmp_path / "data", ("PLAINTEXT", "SASL_SSL"))
    try:
        plain = ["-b", b.addr["PLAINTEXT"]]
        r = strom("users", "add", "frank", "--password-stdin", *plain, stdin="frank-secret\n")
        assert r.returncode == 0, r.stderr
        assert strom("users", "add", "gina", "--password", "g", "-m", "SCRAM-SHA-256", *plain).returncode == 0
        listed = json.loads(strom("users", "list", "--json", *plain).stdout)
        assert listed == {"frank": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                    {"mechanism": "SCRAM-SHA-512", "iterations": 4096}],
                          "gina": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}
        assert strom("users", "delete", "gina", *plain).returncode == 0
        r = strom("users", "delete", "gina", *plain)
        assert r.returncode == 1 and "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1

        # Client commands over SASL_SSL, with librdkafka's names and with the Java client's.
        r = strom("topics", "create", "secured-cli", "--partitions", "2", *_sasl_ssl(b, certs, "frank", "frank-secret"))
        assert r.returncode == 0, r.stderr
        r = strom("topics", "list", *_sasl_ssl(b, certs, "frank", "frank-secret", java_style=True))
        assert r.returncode == 0 and "secured-cli" in r.stdout, r.stderr
        r = strom("bench", "produce", "--records", "2000", "--record-size", "100", "--json", "--topic", "secured-cli",
                  *_sasl_ssl(b, certs, "frank", "frank-secret"))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["records"]["acknowledged"] == 2000
        r = strom("bench", "consume", "--records", "2000", "--json", "--topic", "secured-cli",
                  *_sasl_ssl(b, certs, "frank", "frank-secret", java_style=True))
        assert r.returncode == 0 and json.loads(r.stdout)["records"]["received"] == 2000, r.stderr

        # Commands that speak the protocol themselves (no client library has their APIs) log in too:
        # quotas, and the partition sizes of topics describe (DescribeLogDirs).
        secured = _sasl_ssl(b, certs, "frank", "frank-secret")
        r = strom("quotas", "alter", "--user", "frank", "--add-config", "producer_byte_rate=1048576", *secured)
        assert r.returncode == 0, r.stderr
        r = strom("quotas", "describe", "--user", "frank", "--json", *secured)
        assert r.returncode == 0 and "1048576" in r.stdout, r.stderr
        r = strom("topics", "describe", "secured-cli", "--json", *secured)
        assert r.returncode == 0, r.stderr
        described = json.loads(r.stdout)
        described = described[0] if isinstance(described, list) else described
        assert any(p.get("size_bytes") for p in described["partitions"]), r.stdout
        r = strom("quotas", "describe", "--user", "frank", *_sasl_ssl(b, certs, "frank", "wrong"))
        assert r.returncode == 1 and "SASL authentication failed" in r.stderr, r.stderr

        # The credentials are the broker's: they survive a restart (single broker: a file in log.dirs).
        b.proc.restart()
        r = strom("topics", "list", *_sasl_ssl(b, certs, "frank", "frank-secret"))
        assert r.returncode == 0 and "secured-cli" in r.stdout, r.stderr
        r = strom("topics", "list", "--connect-timeout", "3", *_sasl_ssl(b, certs, "frank", "wrong"))
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    finally:
        b.proc.stop()


def test_java_style_properties_are_translated() -> None:
    props = librdkafka_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                            'password="p";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/me.pem", "ssl.endpoint.identification.algorithm": ""})
    assert props == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                     "sasl.password": "p", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem",
                     "ssl.key.location": "/me.pem", "ssl.endpoint.identification.algorithm": "none"}
    with pytest.raises(ValueError, match="ssl.truststore.type"):
        librdkafka_properties({"ssl.truststore.location": "/x.jks", "ssl.truststore.type": "JKS"})


def test_spark_source_passes_security_options_to_the_client() -> None:
    opts = source_options({"kafka.bootstrap.servers": "h:9093", "subscribe": "t",
                           "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                           "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                                     'required username="spark" password="s";',
                           "kafka.ssl.ca.location": "/ca.pem"}, streaming=False)
    conf = opts.client.client_config()
    assert {k: conf[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                                 "ssl.ca.location")} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "spark",
        "sasl.password": "s", "ssl.ca.location": "/ca.pem"}
    with pytest.raises(OptionError, match="ssl.keystore.type"):
        source_options({"kafka.bootstrap.servers": "h:9093", "subscribe": "t",
                        "kafka.ssl.keystore.location": "/k.jks", "kafka.ssl.keystore.type": "JKS"}, streaming=False)
