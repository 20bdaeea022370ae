"""The schema registry of a broker with SASL, on an https listener: confluent-kafka's
SchemaRegistryClient logs in over HTTP Basic as one of the broker's SASL users, and verifies the
broker's certificate; no login, or a wrong password, is refused with 401."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from brokerproc import free_port
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from helpers import wait_until
from sechelpers import Certs, start_secure

pytestmark = pytest.mark.timeout(90)


def status(url: str, certs: Certs, auth: str | None) -> int:
    req = urllib.request.Request(url + "/subjects")
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(certs.ca)), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_https_and_sasl_users(certs: Certs, tmp_path: Path) -> None:
    port = free_port()
    url = f"https://localhost:{port}"
    b = start_secure(certs, tmp_path / "data", ("PLAINTEXT", "SASL_PLAINTEXT"),
                     **{"schema.registry.listeners": f"https://127.0.0.1:{port}"})
    try:
        wait_until(lambda: status(url, certs, "alice:alice-secret") == 200, timeout=30, what="the registry")
        assert status(url, certs, None) == 401
        assert status(url, certs, "alice:wrong") == 401
        client = SchemaRegistryClient({"url": url, "ssl.ca.location": str(certs.ca),
                                       "basic.auth.user.info": "alice:alice-secret"})
        schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
        schema_id = client.register_schema("secure-value", Schema(schema, "AVRO"))
        assert client.get_latest_version("secure-value").schema_id == schema_id
        intruder = SchemaRegistryClient({"url": url, "ssl.ca.location": str(certs.ca),
                                         "basic.auth.user.info": "alice:guess"})
        with pytest.raises(SchemaRegistryError) as refused:
            intruder.get_subjects()
        assert refused.value.http_status_code == 401
    finally:
        b.proc.stop()
