"""The schema registry served by a real broker, driven over HTTP by confluent-kafka's
SchemaRegistryClient and its serializers (and by plain requests for the error bodies): register and
look up, canonical forms, round trips through strom topics in Avro, JSON Schema and Protobuf,
Confluent's error codes, soft and hard deletes, references, modes, levels, the records in
``_schemas``, and the state after a SIGKILL."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, free_port
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from helpers import wait_until

HTTP_TIMEOUT = 10.0
pytestmark = pytest.mark.timeout(180)


def registry_broker_at(data_dir: Path) -> tuple[BrokerProcess, str]:
    port = free_port()
    broker = BrokerProcess(data_dir, overrides={"schema.registry.listeners": f"http://127.0.0.1:{port}"})
    return broker, f"http://127.0.0.1:{port}"


def call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_loaded(url: str) -> None:
    """The registry answers reads once it has loaded _schemas."""
    wait_until(lambda: call("GET", url + "/subjects")[0] == 200, timeout=30, what="the registry to load")


@pytest.fixture(scope="module")
def registry(registry_broker: BrokerProcess) -> tuple[BrokerProcess, str]:
    return registry_broker, registry_broker.registry_url


def record(*fields: dict[str, Any], name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "example", "fields": list(fields)})


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
EMAIL = {"name": "email", "type": ["null", "string"], "default": None}


def test_register_lookup_idempotent_and_canonical(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    text = record(NAME, AGE)
    first = client.register_schema("users-value", Schema(text, "AVRO"))
    # The same schema, spaced differently: the same id and no new version.
    spaced = json.dumps(json.loads(text), indent=4)
    assert SchemaRegistryClient({"url": url}).register_schema("users-value", Schema(spaced, "AVRO")) == first
    assert client.get_versions("users-value") == [1]
    found = client.lookup_schema("users-value", Schema(spaced, "AVRO"))
    assert (found.schema_id, found.version, found.subject) == (first, 1, "users-value")
    # Another subject, the same schema: the same id, its own version 1.
    assert client.register_schema("people-value", Schema(text, "AVRO")) == first
    status, where = call("GET", f"{url}/schemas/ids/{first}/versions")
    assert status == 200 and where == [{"subject": "people-value", "version": 1},
                                       {"subject": "users-value", "version": 1}]
    assert call("GET", f"{url}/schemas/ids/{first}/subjects") == (200, ["people-value", "users-value"])
    # A compatible change is a new version with a new id.
    second = client.register_schema("users-value", Schema(record(NAME, AGE, EMAIL), "AVRO"))
    assert second > first
    latest = client.get_latest_version("users-value")
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(client.get_schema(first).schema_str) == json.loads(text)
    assert call("GET", f"{url}/subjects/users-value/versions/1/schema")[1] == json.loads(text)
    assert sorted(call("GET", f"{url}/schemas/types")[1]) == ["AVRO", "JSON", "PROTOBUF"]
    assert set(client.get_subjects()) >= {"users-value", "people-value"}


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        def more() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            return len(values) >= count
        wait_until(more, timeout=30, interval=0, what=f"{count} records from {topic}")
    finally:
        consumer.close()
    return values


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def test_avro_round_trip_through_strom(registry: tuple[BrokerProcess, str]) -> None:
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    serializer = AvroSerializer(client, record(NAME, AGE, name="Rider"))
    ctx = SerializationContext("avro-rides", MessageField.VALUE)
    rows = [{"name": f"r{i}", "age": i} for i in range(20)]
    _produce(broker.bootstrap, "avro-rides", [serializer(row, ctx) for row in rows])
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    got = [deserializer(v, ctx) for v in _consume(broker.bootstrap, "avro-rides", len(rows))]
    assert got == rows
    assert client.get_latest_version("avro-rides-value").version == 1


def test_json_schema_round_trip_through_strom(registry: tuple[BrokerProcess, str]) -> None:
    broker, url = registry
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Trip", "type": "object",
                         "properties": {"id": {"type": "integer"}, "city": {"type": "string"}},
                         "required": ["id"]})
    client = SchemaRegistryClient({"url": url})
    serializer = JSONSerializer(schema, client)
    ctx = SerializationContext("json-trips", MessageField.VALUE)
    rows = [{"id": i, "city": "Oslo"} for i in range(10)]
    _produce(broker.bootstrap, "json-trips", [serializer(row, ctx) for row in rows])
    deserializer = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": url}))
    assert [deserializer(v, ctx) for v in _consume(broker.bootstrap, "json-trips", len(rows))] == rows
    assert client.get_latest_version("json-trips-value").schema.schema_type == "JSON"


def _protobuf_message() -> Any:
    file = descriptor_pb2.FileDescriptorProto(name="strom_test/reading.proto", package="stromtest", syntax="proto3")
    msg = file.message_type.add(name="Reading")
    F = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="sensor", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="value", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("stromtest.Reading"))


def test_protobuf_round_trip_through_strom(registry: tuple[BrokerProcess, str]) -> None:
    broker, url = registry
    reading = _protobuf_message()
    client = SchemaRegistryClient({"url": url})
    serializer = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
    ctx = SerializationContext("proto-readings", MessageField.VALUE)
    rows = [reading(sensor=f"s{i}", value=i / 2) for i in range(10)]
    _produce(broker.bootstrap, "proto-readings", [serializer(row, ctx) for row in rows])
    deserializer = ProtobufDeserializer(reading, {"use.deprecated.format": False},
                                        schema_registry_client=SchemaRegistryClient({"url": url}))
    got = [deserializer(v, ctx) for v in _consume(broker.bootstrap, "proto-readings", len(rows))]
    assert [(m.sensor, m.value) for m in got] == [(m.sensor, m.value) for m in rows]
    latest = client.get_latest_version("proto-readings-value")
    assert latest.schema.schema_type == "PROTOBUF"
    status, body = call("GET", f"{url}/schemas/ids/{latest.schema_id}?format=serialized")
    assert status == 200 and body["schemaType"] == "PROTOBUF"
    parsed = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"]))
    assert [m.name for m in parsed.message_type] == ["Reading"]


def _expect(status_and_body: tuple[int, Any], status: int, code: int) -> None:
    got_status, body = status_and_body
    assert (got_status, body.get("error_code") if isinstance(body, dict) else body) == (status, code), body
    assert isinstance(body["message"], str) and body["message"]


def test_every_error_code(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    s = f"{url}/subjects/errors-value"
    v1 = {"schema": record(NAME)}
    assert call("POST", s + "/versions", v1)[0] == 200
    _expect(call("GET", f"{url}/subjects/no-such-subject/versions"), 404, 40401)
    _expect(call("GET", s + "/versions/99"), 404, 40402)
    _expect(call("GET", f"{url}/schemas/ids/99999"), 404, 40403)
    _expect(call("POST", s, {"schema": record(EMAIL)}), 404, 40403)  # a schema the subject does not have
    _expect(call("POST", s + "/versions", {"schema": record({"name": "n", "type": "long"})}), 409, 409)
    _expect(call("POST", s + "/versions", {"schema": '{"type": "record"'}), 422, 42201)
    _expect(call("POST", s + "/versions", {"schema": record({"name": "a", "type": "int", "default": "x"})}),
            422, 42201)
    _expect(call("GET", s + "/versions/first"), 422, 42202)
    _expect(call("GET", s + "/versions/0"), 422, 42202)
    _expect(call("PUT", f"{url}/config/errors-value", {"compatibility": "SIDEWAYS"}), 422, 42203)
    _expect(call("PUT", f"{url}/mode/errors-value", {"mode": "WRITEONLY"}), 422, 42204)
    _expect(call("GET", f"{url}/config/errors-value"), 404, 40408)
    _expect(call("GET", f"{url}/mode/errors-value"), 404, 40409)
    # Deletes: versions, then the subject, soft then permanent, in the wrong order.
    _expect(call("DELETE", s + "/versions/1?permanent=true"), 404, 40407)
    _expect(call("DELETE", s + "?permanent=true"), 404, 40405)
    assert call("DELETE", s + "/versions/1") == (200, 1)
    _expect(call("DELETE", s + "/versions/1"), 404, 40406)
    _expect(call("DELETE", s), 404, 40404)
    # A read-only subject refuses writes (42205); a referenced version refuses deletes (42206).
    assert call("PUT", f"{url}/mode/locked-value", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    _expect(call("POST", f"{url}/subjects/locked-value/versions", v1), 422, 42205)
    base = call("POST", f"{url}/subjects/address/versions", {"schema": record(NAME, name="Address")})
    assert base[0] == 200
    user = {"schema": record({"name": "home", "type": "example.Address"}),
            "references": [{"name": "example.Address", "subject": "address", "version": 1}]}
    assert call("POST", f"{url}/subjects/refuser-value/versions", user)[0] == 200
    _expect(call("DELETE", f"{url}/subjects/address/versions/1"), 422, 42206)
    # An unknown path and a body that is not JSON, in the same shape.
    _expect(call("GET", f"{url}/no/such/path"), 404, 404)
    req = urllib.request.Request(s + "/versions", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(req, timeout=HTTP_TIMEOUT)
    assert bad.value.code == 400 and json.loads(bad.value.read())["error_code"] == 400


def test_soft_and_hard_deletes(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    first = client.register_schema("deletes-value", Schema(record(NAME), "AVRO"))
    second = client.register_schema("deletes-value", Schema(record(NAME, EMAIL), "AVRO"))
    assert client.delete_version("deletes-value", 2) == 2
    assert client.get_versions("deletes-value") == [1]
    # The Python client sends capitalised booleans (deleted=True).
    assert call("GET", f"{url}/subjects/deletes-value/versions?deleted=True")[1] == [1, 2]
    assert call("GET", f"{url}/subjects/deletes-value/versions/2?deleted=True")[1]["id"] == second
    assert client.delete_subject("deletes-value") == [1]
    assert "deletes-value" not in client.get_subjects()
    assert "deletes-value" in call("GET", f"{url}/subjects?deleted=true")[1]
    # A soft-deleted schema keeps its id; it is registered again as a new version with that id (a new
    # client: the first one remembers the schema it registered and would not ask).
    client = SchemaRegistryClient({"url": url})
    assert client.register_schema("deletes-value", Schema(record(NAME), "AVRO")) == first
    assert client.get_versions("deletes-value") == [3]
    assert client.delete_subject("deletes-value") == [3]
    assert sorted(client.delete_subject("deletes-value", permanent=True)) == [1, 2, 3]
    assert "deletes-value" not in call("GET", f"{url}/subjects?deleted=true")[1]
    _expect(call("GET", f"{url}/subjects/deletes-value/versions"), 404, 40401)
    _expect(call("GET", f"{url}/schemas/ids/{second}"), 404, 40403)  # no subject has it any more
    # Ids are not reused: a new schema gets a new one.
    fresh = record(NAME, {"name": "after_delete", "type": "long"})  # in no other subject either
    assert SchemaRegistryClient({"url": url}).register_schema("deletes-value", Schema(fresh, "AVRO")) > second


def test_references_and_referencedby(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    address = client.register_schema("refs-address", Schema(record(NAME, name="Place"), "AVRO"))
    user = Schema(record({"name": "home", "type": "example.Place"}, name="Tenant"), "AVRO",
                  [SchemaReference("example.Place", "refs-address", 1)])
    tenant = client.register_schema("refs-tenant-value", user)
    assert tenant != address
    assert call("GET", f"{url}/subjects/refs-address/versions/1/referencedby") == (200, [tenant])
    fetched = client.get_schema(tenant)
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [("example.Place", "refs-address", 1)]
    # A reference to a version that does not exist is an invalid schema.
    bad = {"schema": record({"name": "home", "type": "example.Place"}, name="T2"),
           "references": [{"name": "example.Place", "subject": "refs-address", "version": 7}]}
    _expect(call("POST", f"{url}/subjects/refs-other/versions", bad), 422, 42201)
    # Records written with the referencing schema round-trip.
    serializer = AvroSerializer(client, fetched, conf={"auto.register.schemas": False, "use.latest.version": True})
    ctx = SerializationContext("refs-tenant", MessageField.VALUE)
    data = serializer({"home": {"name": "Bergen"}}, ctx)
    assert AvroDeserializer(SchemaRegistryClient({"url": url}))(data, ctx) == {"home": {"name": "Bergen"}}
    # Deleting the referenced version is refused while the reference lives.
    with pytest.raises(SchemaRegistryError) as refused:
        client.delete_version("refs-address", 1)
    assert refused.value.error_code == 42206
    client.delete_subject("refs-tenant-value")
    assert client.delete_version("refs-address", 1) == 1


def test_readonly_mode(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    client.register_schema("ro-value", Schema(record(NAME), "AVRO"))
    assert call("PUT", f"{url}/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    try:
        assert call("GET", f"{url}/mode") == (200, {"mode": "READONLY"})
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient({"url": url}).register_schema("ro-value", Schema(record(NAME, EMAIL), "AVRO"))
        assert (refused.value.http_status_code, refused.value.error_code) == (422, 42205)
        _expect(call("DELETE", f"{url}/subjects/ro-value"), 422, 42205)
        # Reads go on.
        assert client.get_latest_version("ro-value").version == 1
        # A subject's own mode wins over the global one.
        assert call("PUT", f"{url}/mode/ro-value", {"mode": "READWRITE"})[0] == 200
        assert SchemaRegistryClient({"url": url}).register_schema("ro-value", Schema(record(NAME, EMAIL), "AVRO"))
        assert call("DELETE", f"{url}/mode/ro-value") == (200, {"mode": "READWRITE"})
        _expect(call("POST", f"{url}/subjects/ro-value/versions", {"schema": record(NAME, AGE, EMAIL)}), 422, 42205)
    finally:
        assert call("PUT", f"{url}/mode", {"mode": "READWRITE"})[0] == 200
    assert client.register_schema("ro-value", Schema(record(NAME, EMAIL, {**AGE, "default": 0}), "AVRO"))


def test_compatibility_levels_over_the_api(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    assert call("GET", f"{url}/config") == (200, {"compatibilityLevel": "BACKWARD"})
    client.register_schema("levels-value", Schema(record(NAME), "AVRO"))
    required_age = {"schema": record(NAME, AGE)}
    check = f"{url}/compatibility/subjects/levels-value/versions/latest?verbose=True"
    status, verdict = call("POST", check, required_age)
    assert status == 200 and verdict["is_compatible"] is False and verdict["messages"]
    assert client.set_compatibility("levels-value", "FORWARD")
    assert call("GET", f"{url}/config/levels-value") == (200, {"compatibilityLevel": "FORWARD"})
    assert call("POST", check, required_age)[1]["is_compatible"] is True
    assert client.test_compatibility("levels-value", Schema(record(NAME, AGE), "AVRO")) is True
    assert client.register_schema("levels-value", Schema(record(NAME, AGE), "AVRO"))
    for level in ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                  "FULL_TRANSITIVE"):
        assert call("PUT", f"{url}/config/levels-value", {"compatibility": level.lower()}) == \
            (200, {"compatibility": level})
    assert call("DELETE", f"{url}/config/levels-value") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    assert call("GET", f"{url}/config/levels-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    _expect(call("GET", f"{url}/compatibility/subjects/levels-value/versions/9"), 405, 405)


def test_host_check(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    status, _ = call("GET", f"{url}/subjects", headers={"Host": "attacker.example"})
    assert status == 421
    assert call("GET", f"{url}/subjects", headers={"Host": "localhost"})[0] == 200


def _schemas_records(bootstrap: str) -> list[tuple[dict[str, Any], Any]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "schemas-reader", "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.subscribe(["_schemas"])
    out: list[tuple[dict[str, Any], Any]] = []
    try:
        def at_end() -> bool:
            msg = consumer.poll(0.5)
            if msg is None:
                return False
            if msg.error() is not None:
                return msg.error().code() == -191  # _PARTITION_EOF
            out.append((json.loads(msg.key()), json.loads(msg.value()) if msg.value() is not None else None))
            return False
        wait_until(at_end, timeout=30, interval=0, what="the end of _schemas")
    finally:
        consumer.close()
    return out


def test_records_in_schemas_are_confluents(registry: tuple[BrokerProcess, str]) -> None:
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    schema_id = client.register_schema("format-value", Schema(record(NAME), "AVRO"))
    client.set_compatibility("format-value", "FULL")
    client.delete_subject("format-value")
    client.delete_subject("format-value", permanent=True)
    records = [(k, v) for k, v in _schemas_records(broker.bootstrap) if k.get("subject") == "format-value"]
    assert records[0] == ({"keytype": "SCHEMA", "subject": "format-value", "version": 1, "magic": 1},
                          {"subject": "format-value", "version": 1, "id": schema_id, "schema": record(NAME).replace(" ", ""),
                           "deleted": False})
    assert ({"keytype": "CONFIG", "subject": "format-value", "magic": 0}, {"compatibilityLevel": "FULL"}) in records
    assert ({"keytype": "DELETE_SUBJECT", "subject": "format-value", "magic": 0},
            {"subject": "format-value", "version": 1}) in records
    # The permanent delete: a tombstone under the version's key.
    assert ({"keytype": "SCHEMA", "subject": "format-value", "version": 1, "magic": 1}, None) in records


def test_state_survives_sigkill(tmp_path: Path) -> None:
    broker, url = registry_broker_at(tmp_path / "data")
    broker.start()
    try:
        wait_loaded(url)
        client = SchemaRegistryClient({"url": url})
        ids = [client.register_schema("durable-value", Schema(record(NAME, *extra), "AVRO"))
               for extra in ([], [EMAIL], [EMAIL, {**AGE, "default": 1}])]
        client.register_schema("other-value", Schema(record(AGE, name="Other"), "AVRO"))
        client.set_compatibility("durable-value", "FULL_TRANSITIVE")
        client.set_compatibility(level="NONE")
        assert call("PUT", f"{url}/mode/other-value", {"mode": "READONLY"})[0] == 200
        client.delete_version("durable-value", 3)
        client.delete_version("durable-value", 3, permanent=True)  # the highest id, gone for good
        broker.kill()
        broker.start()
        wait_loaded(url)
        client = SchemaRegistryClient({"url": url})
        assert client.get_versions("durable-value") == [1, 2]
        assert [client.get_version("durable-value", v).schema_id for v in (1, 2)] == ids[:2]
        assert call("GET", f"{url}/config/durable-value") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
        assert call("GET", f"{url}/config") == (200, {"compatibilityLevel": "NONE"})
        assert call("GET", f"{url}/mode/other-value") == (200, {"mode": "READONLY"})
        # The permanently deleted id is not given again.
        new_id = client.register_schema("durable-value", Schema(record(NAME, EMAIL, {"name": "x", "type": "long",
                                                                                     "default": 0}), "AVRO"))
        assert new_id > ids[2]
        # Versions follow the ones the subject holds (a permanently deleted one is gone, as in Confluent).
        assert client.get_versions("durable-value") == [1, 2, 3]
    finally:
        broker.stop()
