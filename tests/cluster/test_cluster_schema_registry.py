"""The schema registry in a 3-broker cluster, driven by confluent-kafka's SchemaRegistryClient over
HTTP on every broker: writes on any broker (forwarded to the registry of the broker leading
``_schemas``), one sequence of ids and versions whoever answered, every write readable at once from
the broker that answered it, registering again within 60 s of the SIGKILL of ``_schemas``' leader
with nothing acknowledged lost, and a restarted broker catching up."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from brokerproc import free_port
from clusterproc import Cluster
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from helpers import wait_until

pytestmark = pytest.mark.timeout(300)

HTTP_TIMEOUT = 40.0  # a forwarded write is retried for up to 30 s while the leader changes


class RegistryCluster:
    def __init__(self, cluster: Cluster, urls: dict[int, str]) -> None:
        self.cluster = cluster
        self.urls = urls

    def live(self) -> dict[int, str]:
        return {b: u for b, u in self.urls.items() if self.cluster.brokers[b].alive()}


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryCluster]:
    ports = {b: free_port() for b in (1, 2, 3)}

    def settings(broker_id: int, _client_port: int) -> dict[str, str]:
        return {"schema.registry.listeners": f"http://127.0.0.1:{ports[broker_id]}"}

    c = Cluster(tmp_path_factory.mktemp("registry-cluster"), broker_settings=settings).start()
    try:
        rc = RegistryCluster(c, {b: f"http://127.0.0.1:{p}" for b, p in ports.items()})
        for url in rc.urls.values():
            wait_until(lambda u=url: call("GET", f"{u}/subjects")[0] == 200, 30, what=f"the registry at {url}")
        yield rc
    finally:
        c.stop()


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def avro(name: str, *fields: str) -> str:
    """A record whose fields all have defaults: any two such versions are compatible both ways."""
    return json.dumps({"type": "record", "name": name, "namespace": "cluster",
                       "fields": [{"name": f, "type": "long", "default": 0} for f in fields]})


def client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "timeout": HTTP_TIMEOUT})


def view(url: str, ids: list[int], subjects: list[str]) -> dict[str, Any]:
    """What one broker's registry answers for these ids and subjects (plain HTTP: no client cache)."""
    out: dict[str, Any] = {}
    for i in ids:
        out[f"id {i}"] = call("GET", f"{url}/schemas/ids/{i}")
    for s in subjects:
        status, versions = call("GET", f"{url}/subjects/{s}/versions")
        out[s] = (status, versions)
        for v in versions if status == 200 else []:
            out[f"{s}/{v}"] = call("GET", f"{url}/subjects/{s}/versions/{v}")
    return out


def register_and_read(url: str, subject: str, text: str) -> int:
    """Register through one broker, then read it back from that same broker at once."""
    schema_id = client(url).register_schema(subject, Schema(text, "AVRO"))
    status, body = call("GET", f"{url}/schemas/ids/{schema_id}")
    assert status == 200 and json.loads(body["schema"]) == json.loads(text), (url, schema_id, status, body)
    status, latest = call("GET", f"{url}/subjects/{subject}/versions/latest")
    assert status == 200 and latest["id"] >= 1, (url, subject, status, latest)
    return schema_id


def test_concurrent_writes_on_every_broker_agree(registries: RegistryCluster) -> None:
    cluster = registries.cluster
    assert cluster.state("_schemas", 0) is None  # made by the first write
    urls = registries.urls
    jobs: list[tuple[str, str, str]] = []  # (url, subject, schema)
    for b, url in urls.items():
        for k in range(4):
            jobs.append((url, f"own-{b}-{k}-value", avro(f"Own{b}x{k}", f"f{b}{k}")))
        for k in range(4):
            jobs.append((url, "shared-value", avro("Shared", "base", f"b{b}k{k}")))
    start = threading.Barrier(len(jobs))

    def run(job: tuple[str, str, str]) -> int:
        start.wait(30)
        return register_and_read(*job)

    with ThreadPoolExecutor(len(jobs)) as pool:
        ids = list(pool.map(run, jobs, timeout=120))

    # _schemas was made once, replicated on the three brokers.
    assert sorted(cluster.replicas("_schemas")[0]) == [1, 2, 3]
    cluster.settle(["_schemas"])
    # Distinct schemas got distinct ids; the shared subject one version per registration, 1..12.
    assert len(set(ids)) == len(jobs), ids
    shared = {text: i for (_, subject, text), i in zip(jobs, ids, strict=True) if subject == "shared-value"}
    some = urls[1]
    status, versions = call("GET", f"{some}/subjects/shared-value/versions")
    assert (status, versions) == (200, list(range(1, 13)))
    by_version = {v: call("GET", f"{some}/subjects/shared-value/versions/{v}")[1] for v in versions}
    assert sorted(sv["id"] for sv in by_version.values()) == sorted(shared.values())
    for sv in by_version.values():
        assert shared[avro_text(sv["schema"])] == sv["id"]
    # Every broker answers the same for every id and subject.
    subjects = sorted({subject for _, subject, _ in jobs})
    views = {b: view(url, ids, subjects) for b, url in urls.items()}
    assert views[1] == views[2] == views[3]
    assert all(views[1][f"id {i}"][0] == 200 for i in ids)
    # A write on a broker not leading _schemas is readable there at once, also a config change.
    leader = cluster.leader("_schemas", 0)
    other = next(u for b, u in urls.items() if b != leader)
    assert call("PUT", f"{other}/config/own-1-0-value", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    assert call("GET", f"{other}/config/own-1-0-value")[1] == {"compatibilityLevel": "FULL"}


def avro_text(schema: str) -> str:
    """A stored (canonical) Avro text as ``avro`` spells it, to match a registration."""
    doc = json.loads(schema)
    return avro(doc["name"], *(f["name"] for f in doc["fields"]))


class Writer:
    """Registers a new subject after another through one broker, in a thread, until stopped; keeps
    every acknowledged id with its schema and when its request began. A write may be refused while
    no leader is known (5xx), nothing else."""

    def __init__(self, url: str, tag: str) -> None:
        self.url = url
        self.tag = tag
        self.acked: list[tuple[float, int, str]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            text = avro(f"During{self.tag}x{n}", f"d{n}")
            began = time.monotonic()
            try:
                self.acked.append((began, register_and_read(self.url, f"during-{self.tag}-{n}-value", text), text))
            except SchemaRegistryError as e:
                if e.http_status_code < 500:
                    self.failures.append(repr(e))
            except Exception as e:  # a read-back that did not see the write
                self.failures.append(repr(e))
            n += 1

    def acked_after(self, t: float) -> bool:
        return any(began > t for began, _, _ in self.acked)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(HTTP_TIMEOUT * 2)


def test_registering_survives_the_kill_of_the_schemas_leader(registries: RegistryCluster) -> None:
    cluster = registries.cluster
    cluster.ensure_all_up()
    urls = registries.urls
    # Acknowledged before the kill: some registrations through each broker.
    before: dict[int, str] = {}
    for b, url in urls.items():
        for k in range(3):
            text = avro(f"Before{b}x{k}", f"g{b}{k}")
            before[register_and_read(url, f"before-{b}-{k}-value", text)] = text
    leader = cluster.wait_leader("_schemas", 0)
    # Writers on the two other brokers register on through the kill.
    writers = [Writer(url, str(b)) for b, url in urls.items() if b != leader]
    try:
        wait_until(lambda: all(w.acked for w in writers), 30, what="the writers' first registrations")
        killed_at = time.monotonic()
        cluster.brokers[leader].kill()
        cluster.settle()
        # Registering through each survivor works again within 60 s of the kill.
        wait_until(lambda: all(w.acked_after(killed_at) for w in writers) or any(w.failures for w in writers),
                   max(1.0, 60 - (time.monotonic() - killed_at)), what="registrations begun after the kill")
    finally:
        for w in writers:
            w.stop()
    assert not [f for w in writers for f in w.failures]
    assert all(w.acked_after(killed_at) for w in writers)
    survivors = registries.live()
    assert leader not in survivors and len(survivors) == 2
    assert cluster.wait_leader("_schemas", 0, not_in={leader}) != leader
    during = {i: text for w in writers for _, i, text in w.acked}
    assert len(during) == sum(len(w.acked) for w in writers)  # no id given twice

    # And the same subject through both survivors: one sequence of versions.
    after: dict[int, str] = {}
    for b, url in survivors.items():
        text = avro("After", f"h{b}")
        after[register_and_read(url, "after-value", text)] = text
    # Nothing acknowledged lost, no id given twice: every survivor serves every id with its schema.
    acknowledged = {**before, **during, **after}
    assert len(acknowledged) == len(before) + len(during) + len(after)
    for url in survivors.values():
        for schema_id, text in acknowledged.items():
            status, body = call("GET", f"{url}/schemas/ids/{schema_id}")
            assert status == 200 and json.loads(body["schema"]) == json.loads(text), (url, schema_id, body)
        assert call("GET", f"{url}/subjects/after-value/versions")[1] == [1, 2]

    # The killed broker, restarted, catches up: it serves what was written while it was down.
    cluster.start_broker(leader, ["_schemas"])
    url = urls[leader]
    wait_until(lambda: call("GET", f"{url}/subjects")[0] == 200, 30, what="the restarted broker's registry")
    for schema_id, text in acknowledged.items():
        status, body = call("GET", f"{url}/schemas/ids/{schema_id}")
        assert status == 200 and json.loads(body["schema"]) == json.loads(text), (schema_id, body)
    assert call("GET", f"{url}/subjects/after-value/versions")[1] == [1, 2]
    # And it takes writes again (forwarded to the new leader), readable there at once.
    register_and_read(url, "after-value", avro("After", "i"))
    cluster.wait_full_isr("_schemas", 1)
    views = {b: view(u, sorted(acknowledged), ["after-value"]) for b, u in urls.items()}
    assert views[1] == views[2] == views[3]
