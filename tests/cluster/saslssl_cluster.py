"""What the secured cluster tests share: brokers that talk to each other over SASL_SSL with
SCRAM-SHA-512 as the user ``broker``, that user (and others) created in ZooKeeper before the brokers
start (``strom users add --zookeeper``), and a throwaway CA for the TLS of it all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trustme
from brokerproc import free_port

BROKER_USER = ("broker", "broker-secret")
BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               f'username="{BROKER_USER[0]}" password="{BROKER_USER[1]}";')


def write_tls_files(root: Path) -> None:
    """A new CA in ``root``/ca.pem and a key and certificate for 127.0.0.1 and localhost in
    ``root``/server.pem."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(root / "server.pem"))


def add_scram_users(zk_connect: str, *users: tuple[str, str]) -> None:
    """SCRAM-SHA-512 users (name, password) written in ZooKeeper, as an operator does before the
    brokers that log in with them start."""
    for user, password in users:
        subprocess.run([sys.executable, "-m", "strom.cli.main", "users", "add", user, "--password", password,
                        "-m", "SCRAM-SHA-512", "--zookeeper", zk_connect], check=True, timeout=60,
                       capture_output=True)


def inter_broker_sasl_ssl(root: Path, client_port: int) -> dict[str, str]:
    """A broker's settings for a PLAINTEXT listener CLIENT on ``client_port`` and the inter-broker
    listener INTERNAL (a free port) over SASL_SSL, with the TLS files of ``write_tls_files(root)``."""
    return {
        "listeners": f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{free_port()}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(root / "server.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(root / "ca.pem"),
    }
