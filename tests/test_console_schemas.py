"""The console's schemas page in a real headless browser (as test_console.py): subjects registered
with confluent-kafka's SchemaRegistryClient appear with their versions, ids, types and levels; a
subject's page shows each version's schema text; a broker without a registry says so."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from brokerproc import BrokerProcess
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from playwright.sync_api import Page, expect
from test_console import browser, page, shot  # noqa: F401  (fixtures)
from test_metrics import admin_url

pytestmark = pytest.mark.timeout(240)

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
V2 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}


def test_schemas_page(registry_broker: BrokerProcess, page: Page) -> None:  # noqa: F811
    client = SchemaRegistryClient({"url": registry_broker.registry_url})
    first = client.register_schema("orders-value", Schema(json.dumps(V1), "AVRO"))
    second = client.register_schema("orders-value", Schema(json.dumps(V2), "AVRO"))
    client.register_schema("orders-key", Schema('"string"', "AVRO"))
    client.set_compatibility("orders-value", "FULL")
    client.register_schema("gone-value", Schema('"long"', "AVRO"))
    client.delete_subject("gone-value")

    page.goto(admin_url(registry_broker) + "/#/schemas")
    row = page.locator('tr[data-subject="orders-value"]')
    expect(row).to_be_visible()
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("1, 2")
    expect(cells.nth(2)).to_have_text("2")
    expect(cells.nth(3)).to_have_text(str(second))
    expect(cells.nth(4)).to_have_text("AVRO")
    expect(cells.nth(5)).to_have_text("FULL")
    expect(cells.nth(6)).to_have_text("READWRITE")
    expect(page.locator('tr[data-subject="orders-key"] td').nth(5)).to_have_text("BACKWARD (global)")
    expect(page.locator('tr[data-subject="gone-value"]')).to_contain_text("deleted")
    expect(page.locator("#sc-level")).to_contain_text("BACKWARD")
    shot(page, "schemas")

    row.locator("a", has_text="orders-value").click()
    expect(page.locator("#sd-level")).to_contain_text("FULL")
    panels = page.locator("#sd-versions .panel")
    expect(panels).to_have_count(2)
    expect(panels.first).to_contain_text(f"Version 2 id {second} · AVRO")
    expect(panels.nth(1)).to_contain_text(f"Version 1 id {first} · AVRO")
    assert json.loads(panels.first.locator("pre").inner_text()) == V2
    shot(page, "schema-subject")

    # a version registered while the page is open appears without a reload
    v3 = dict(V2, fields=[*V2["fields"], {"name": "qty", "type": "int", "default": 1}])
    third = client.register_schema("orders-value", Schema(json.dumps(v3), "AVRO"))
    expect(panels).to_have_count(3)
    expect(panels.first).to_contain_text(f"Version 3 id {third}")


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_api_without_a_registry_and_unknown_subject(broker: BrokerProcess, registry_broker: BrokerProcess) -> None:
    assert get_json(admin_url(broker) + "/api/schemas") == (200, {"enabled": False})
    status, body = get_json(admin_url(registry_broker) + "/api/schemas/no-such-subject")
    assert status == 404 and body["error_code"] == 40401
