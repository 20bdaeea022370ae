"""`strom dev-cluster` (what `make cluster` runs): every broker serves its own schema registry, and the
registries are one registry (a schema registered at one broker is read at the others)."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from strom.devcluster import DevClusterError, broker_overrides, free_port, planned_ports, port_in_use

pytestmark = pytest.mark.timeout(180)


def free_ports(n: int) -> int:
    """The first of n consecutive free loopback ports."""
    for _ in range(200):
        first = free_port()
        if first + n <= 65535 and all(port_in_use(first + i) is None for i in range(n)):
            return first
    raise RuntimeError(f"no {n} consecutive free ports")


def test_planned_ports_and_settings_give_each_broker_its_registry() -> None:
    assert planned_ports(3, 9092, 2181, 8081) == {
        9092: "broker 1's listener", 9093: "broker 2's listener", 9094: "broker 3's listener",
        8081: "broker 1's schema registry", 8082: "broker 2's schema registry", 8083: "broker 3's schema registry",
        2181: "ZooKeeper's"}
    assert broker_overrides(2, 3, 8081)["schema.registry.listeners"] == "http://127.0.0.1:8082"
    assert "schema.registry.listeners" not in broker_overrides(2, 3, None)
    assert set(planned_ports(2, 9092, None, None)) == {9092, 9093}
    with pytest.raises(DevClusterError, match="port 9092 cannot be both broker 1's schema registry and broker 1's listener"):
        planned_ports(3, 9092, None, 9092)


def test_dev_cluster_serves_a_registry_on_every_broker(tmp_path: Path) -> None:
    base, registry, zk = free_ports(2), free_ports(2), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "dev-cluster", "2", "--base-port", str(base),
                             "--registry-port", str(registry), "--zookeeper-port", str(zk),
                             "--data-dir", str(tmp_path / "cluster")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("Ctrl-C stops everything") for line in seen):
            assert proc.poll() is None, "".join(seen)
            try:
                seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError("dev-cluster did not say it was ready:\n" + "".join(seen)) from None
        urls = [f"http://127.0.0.1:{registry}", f"http://127.0.0.1:{registry + 1}"]
        assert f"schema registry: {','.join(urls)}\n" in seen, "".join(seen)
        assert any(re.match(rf"\[broker 2\] .*{registry + 1}", line) for line in seen), "".join(seen)

        schema = json.dumps({"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "long"}]})
        schema_id = SchemaRegistryClient({"url": urls[0]}).register_schema("pings-value", Schema(schema, "AVRO"))
        other = SchemaRegistryClient({"url": urls[1]})
        assert json.loads(other.get_schema(schema_id).schema_str) == json.loads(schema)
        assert other.get_latest_version("pings-value").schema_id == schema_id
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
