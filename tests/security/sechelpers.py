"""Certificates and secured brokers for the security tests (a module of its own: several test
directories have a conftest.py, so ``from conftest import`` is ambiguous in a whole-suite run).

Certificates come from ``trustme``: a throwaway CA and leaf certificates made in memory in
milliseconds, with the subject names the tests need, and no openssl command lines to keep right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import trustme
from brokerproc import BrokerProcess, free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path  # the CA certificate (clients' ssl.ca.location, the broker's truststore)
    server: Path  # key + chain for 127.0.0.1 and localhost
    client: Path  # key + chain, subject CN=client,OU=eng,O=x
    client_cert: Path
    client_key: Path
    ca_obj: trustme.CA


def make_certs(d: Path) -> Certs:
    ca = trustme.CA(organization_name="strom test CA")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    client = ca.issue_cert("client.example", common_name="client", organization_unit_name="eng",
                           organization_name="x")
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    client.cert_chain_pems[0].write_to_path(str(d / "client-cert.pem"))
    client.private_key_pem.write_to_path(str(d / "client-key.pem"))
    return Certs(d, d / "ca.pem", d / "server.pem", d / "client.pem", d / "client-cert.pem", d / "client-key.pem", ca)


@dataclass
class SecureBroker:
    """One broker with a listener of each kind; ``addr[name]`` is host:port of that listener."""

    proc: BrokerProcess
    addr: dict[str, str]

    @property
    def started(self) -> list[BrokerProcess]:
        """For tests/conftest.py's failure report: the broker whose log to attach."""
        return [self.proc]

    def log_text(self) -> str:
        return self.proc.log_text()


def secure_overrides(certs: Certs, ports: dict[str, int], **extra: str) -> dict[str, str]:
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    overrides = {
        "listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.mtls.ssl.client.auth": "required",
        # A rule for another kind of subject, then Kafka's DEFAULT (the DN as it is).
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=ops,O=x$/$1/L,DEFAULT",
    }
    overrides.update(extra)
    return overrides


def start_secure(certs: Certs, data_dir: Path, names: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                                                         "SASL_SSL", "MTLS"), **extra: str
                 ) -> SecureBroker:
    ports = {name: free_port() for name in names}
    proc = BrokerProcess(data_dir, port=ports[names[0]], overrides=secure_overrides(certs, ports, **extra))
    proc.start()
    return SecureBroker(proc, {name: f"127.0.0.1:{port}" for name, port in ports.items()})


def start_admin_broker(certs: Certs, data_dir: Path, scheme: str, super_users: str) -> SecureBroker:
    """A broker with an ACL authorizer and its admin HTTP listener on ``scheme``://127.0.0.1 (a free
    port), reached through PLAINTEXT (User:ANONYMOUS, which sets the tests up: name it in
    ``super_users``) and SASL_PLAINTEXT (the users of PLAIN_JAAS)."""
    return start_secure(certs, data_dir, ("PLAINTEXT", "SASL_PLAINTEXT"),
                        **{"admin.listeners": f"{scheme}://127.0.0.1:0",
                           "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "super.users": super_users})


def admin_url(b: BrokerProcess) -> str:
    """The admin listener's URL (http or https, 127.0.0.1 and its port), as the broker logs it once ready."""
    for line in b.log_lines:
        m = re.search(r"admin listener ready on (https?://\S+) ", line)
        if m:
            return m.group(1)
    raise AssertionError("no admin listener in the log")


def add_scram_user(bootstrap: str, name: str, password: str) -> None:
    """A SCRAM user through the AdminClient (AlterUserScramCredentials), both mechanisms."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [UserScramCredentialUpsertion(name, ScramCredentialInfo(m, 4096), password.encode())
               for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for f in admin.alter_user_scram_credentials(upserts, request_timeout=10).values():
        f.result(timeout=15)
