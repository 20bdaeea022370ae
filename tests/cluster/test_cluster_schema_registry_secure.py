"""The schema registry of a secured cluster: https registry listeners, SCRAM users (so every request
needs HTTP Basic credentials), brokers talking to each other over SASL_SSL. A write taken by a
broker that does not lead ``_schemas`` is forwarded over https with the client's credentials, and
read back everywhere (the other brokers read ``_schemas`` from its leader over SASL_SSL); a wrong
password is refused by the broker that got it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerproc import free_port
from clusterproc import Cluster
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from helpers import wait_until
from saslssl_cluster import BROKER_USER, add_scram_users, inter_broker_sasl_ssl, write_tls_files

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[int, str], Path]]:
    root = tmp_path_factory.mktemp("secure-registry-cluster")
    write_tls_files(root)
    registry_ports = {b: free_port() for b in (1, 2, 3)}

    def broker_settings(broker_id: int, client_port: int) -> dict[str, str]:
        return {**inter_broker_sasl_ssl(root, client_port),
                "schema.registry.listeners": f"https://127.0.0.1:{registry_ports[broker_id]}"}

    c = Cluster(root, broker_settings=broker_settings,
                before_brokers=lambda zk: add_scram_users(zk, BROKER_USER, ("alice", "alice-secret"))).start()
    try:
        yield c, {b: f"https://127.0.0.1:{p}" for b, p in registry_ports.items()}, root
    finally:
        c.stop()


def client(url: str, root: Path, password: str = "alice-secret") -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "ssl.ca.location": str(root / "ca.pem"),
                                 "basic.auth.user.info": f"alice:{password}", "timeout": 40, "max.retries": 0})


def test_writes_forwarded_over_https_with_the_clients_login(secured: tuple[Cluster, dict[int, str], Path]) -> None:
    cluster, urls, root = secured
    for url in urls.values():
        wait_until(lambda u=url: _loaded(client(u, root)), 30, what=f"the registry at {url}")
    ids: dict[int, str] = {}
    for b, url in urls.items():  # the first makes _schemas; at least two of them are not its leader
        text = json.dumps({"type": "record", "name": f"Secured{b}", "fields": [{"name": "x", "type": "long"}]})
        schema_id = client(url, root).register_schema(f"secured-{b}-value", Schema(text, "AVRO"))
        assert json.loads(client(url, root).get_schema(schema_id).schema_str) == json.loads(text)
        ids[schema_id] = text
    assert len(ids) == 3
    cluster.settle(["_schemas"])
    leader = cluster.leader("_schemas", 0)
    for url in urls.values():
        fresh = client(url, root)
        for schema_id, text in ids.items():
            assert json.loads(fresh.get_schema(schema_id).schema_str) == json.loads(text)
        assert sorted(s for s in fresh.get_subjects() if s.startswith("secured-")) == \
            ["secured-1-value", "secured-2-value", "secured-3-value"]
    # A wrong password is refused where it came, not forwarded.
    other = next(u for b, u in urls.items() if b != leader)
    with pytest.raises(SchemaRegistryError) as refused:
        client(other, root, "wrong").register_schema("secured-x-value", Schema('"string"', "AVRO"))
    assert refused.value.http_status_code == 401


def _loaded(c: SchemaRegistryClient) -> bool:
    try:
        c.get_subjects()
        return True
    except SchemaRegistryError:
        return False
