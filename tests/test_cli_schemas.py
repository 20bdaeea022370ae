"""`strom schemas list|get|register|delete|config` as real subprocesses against a broker's schema
registry, checked with confluent-kafka's SchemaRegistryClient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from strom.cli.schemas import client_config

pytestmark = pytest.mark.timeout(120)

STROM = [sys.executable, "-m", "strom.cli.main"]
V1 = {"type": "record", "name": "Truck", "fields": [{"name": "id", "type": "long"}]}
V2 = {"type": "record", "name": "Truck", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "plate", "type": "string", "default": ""}]}


def schemas(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STROM_DEBUG", "STROM_SCHEMA_REGISTRY_URL")}
    return subprocess.run([*STROM, "schemas", *args, "--registry", url], input=stdin, capture_output=True, text=True,
                          timeout=60, env=env)


def ok(url: str, *args: str, **kw: Any) -> str:
    proc = schemas(url, *args, **kw)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    return proc.stdout


def failure(url: str, *args: str) -> str:
    proc = schemas(url, *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def fresh(url: str) -> Any:
    """A client with nothing cached (the client keeps latest versions and levels it has read)."""
    return SchemaRegistryClient({"url": url})


def test_register_list_get_config_delete(registry_broker: Any, tmp_path: Path) -> None:
    url = registry_broker.registry_url
    v1_file = tmp_path / "v1.avsc"
    v1_file.write_text(json.dumps(V1, indent=4))

    out = ok(url, "register", "trucks-value", str(v1_file))
    first_id = fresh(url).get_latest_version("trucks-value").schema_id
    assert out.strip() == f"registered trucks-value version 1: id {first_id}"
    out = ok(url, "register", "trucks-value", "-", stdin=json.dumps(V2))  # from stdin
    second = fresh(url).get_latest_version("trucks-value")
    assert second.version == 2 and out.strip() == f"registered trucks-value version 2: id {second.schema_id}"
    ok(url, "register", "other-value", "--schema", '{"type": "string"}')

    rows = json.loads(ok(url, "list", "--json"))
    assert {r["subject"]: (r["versions"], r["latest"], r["id"], r["type"], r["compatibility"]) for r in rows} == {
        "trucks-value": ([1, 2], 2, second.schema_id, "AVRO", "BACKWARD"),
        "other-value": ([1], 1, fresh(url).get_latest_version("other-value").schema_id, "AVRO", "BACKWARD"),
    }
    table = ok(url, "list", "--prefix", "trucks")
    assert "trucks-value" in table and "other-value" not in table

    shown = ok(url, "get", "trucks-value", "--version", "1")
    assert shown.splitlines()[0] == f"subject trucks-value version 1 id {first_id} schemaType AVRO"
    assert json.loads("\n".join(shown.splitlines()[1:])) == V1
    got = json.loads(ok(url, "get", "--id", str(second.schema_id), "--json"))
    assert json.loads(got["schema"]) == V2 and got["id"] == second.schema_id

    # compatibility: global and per subject; an incompatible schema is refused with Confluent's code
    assert ok(url, "config").strip() == "the registry (global): BACKWARD"
    assert ok(url, "config", "trucks-value", "--set", "full").strip() == "trucks-value: FULL"
    assert fresh(url).get_compatibility("trucks-value") == "FULL"
    assert ok(url, "config", "trucks-value").strip() == "trucks-value: FULL"
    line = failure(url, "register", "trucks-value", "--schema", json.dumps(
        {"type": "record", "name": "Truck", "fields": [{"name": "id", "type": "string"}]}))
    assert line.startswith("Error: cannot register a schema under trucks-value:") and "(error 409)" in line
    assert ok(url, "config", "trucks-value", "--delete").strip() == \
        "trucks-value: own level dropped; the global level applies (BACKWARD)"

    # deletes: a version, soft then permanent; then the subject
    assert ok(url, "delete", "trucks-value", "--version", "1").strip() == "soft-deleted trucks-value version 1"
    assert fresh(url).get_versions("trucks-value") == [2]
    assert ok(url, "delete", "trucks-value", "--version", "1", "--permanent").strip() == \
        "permanently deleted trucks-value version 1"
    assert ok(url, "delete", "trucks-value").strip() == "soft-deleted trucks-value versions 2"
    assert fresh(url).get_subjects() == ["other-value"]
    assert "(error 4040" in failure(url, "get", "trucks-value")  # no live version


def test_errors_are_one_line(registry_broker: Any) -> None:
    url = registry_broker.registry_url
    assert "(error 42201)" in failure(url, "register", "bad-value", "--schema", "{not a schema")
    assert "(error 40403)" in failure(url, "get", "--id", "9999")
    line = failure("http://127.0.0.1:9", "list")  # nothing listens on the discard port
    assert "no schema registry answers at http://127.0.0.1:9" in line
    assert "-X nonsense" in failure(url, "list", "-X", "nonsense=1")


def test_security_settings() -> None:
    config = client_config("https://r:8081", [("sasl.username", "alice"), ("sasl.password", "s3cret"),
                                              ("ssl.ca.location", "/ca.pem")])
    assert config["basic.auth.user.info"] == "alice:s3cret" and config["ssl.ca.location"] == "/ca.pem"
    with pytest.raises(click.UsageError):
        client_config("http://r", [("sasl.username", "alice")])
