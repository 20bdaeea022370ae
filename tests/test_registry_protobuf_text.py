"""Protobuf schemas as ``.proto`` source text, against a real broker's registry: registered over
HTTP as curl (and Confluent's Java clients) send them, with references to other subjects and
imports of the well-known files; returned as text, and as the serialized descriptor with
``?format=serialized``; the same file as text and as the descriptor confluent-kafka's Python
serializer sends gets one id; compatibility checks on text schemas; and a round trip through a
strom topic with ProtobufSerializer/ProtobufDeserializer of classes protoc generated from the text."""

from __future__ import annotations

import base64
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from grpc_tools import protoc
from test_schema_registry import _consume, _produce, call

pytestmark = pytest.mark.timeout(180)

OTHER = """syntax = "proto3";
package stromtext;

message Place {
  string city = 1;
  double lat = 2;
  double lon = 3;
}
"""

RIDE = """syntax = "proto3";
package stromtext;

import "google/protobuf/timestamp.proto";
import "strom_pt_place.proto";

// A ride, as a Java producer would register it.
message Ride {
  int64 ride_id = 1;
  google.protobuf.Timestamp started = 2;
  Place pickup = 3;
  repeated string tags = 4;
  oneof payment {
    string card = 5;
    int64 voucher = 6;
  }
}
"""

PLACE_REF = {"name": "strom_pt_place.proto", "subject": "strom_pt_place.proto", "version": 1}


@pytest.fixture(scope="module")
def registry(registry_broker: BrokerProcess) -> tuple[BrokerProcess, str]:
    return registry_broker, registry_broker.registry_url


def register(url: str, subject: str, schema: str, references: list[dict[str, Any]] | None = None,
             path: str = "/versions") -> tuple[int, Any]:
    body: dict[str, Any] = {"schema": schema, "schemaType": "PROTOBUF"}
    if references:
        body["references"] = references
    return call("POST", f"{url}/subjects/{subject}{path}", body)


def test_text_with_references_and_well_known_imports(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    status, body = register(url, "strom_pt_place.proto", OTHER)
    assert status == 200, body
    place_id = body["id"]
    status, body = register(url, "text-rides-value", RIDE, [PLACE_REF])
    assert status == 200, body
    ride_id = body["id"]
    assert ride_id != place_id

    # Returned as registered, text by default.
    status, body = call("GET", f"{url}/schemas/ids/{ride_id}")
    assert status == 200
    assert body == {"schemaType": "PROTOBUF", "references": [PLACE_REF], "schema": RIDE}
    status, body = call("GET", f"{url}/subjects/text-rides-value/versions/latest")
    assert body["schema"] == RIDE and body["version"] == 1 and body["id"] == ride_id

    # ?format=serialized: the descriptor protoc made of it, base64.
    status, body = call("GET", f"{url}/schemas/ids/{ride_id}?format=serialized")
    assert status == 200 and body["references"] == [PLACE_REF]
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"], validate=True))
    assert file.package == "stromtext" and [m.name for m in file.message_type] == ["Ride"]
    assert list(file.dependency) == ["google/protobuf/timestamp.proto", "strom_pt_place.proto"]
    fields = {f.name: f.type_name for f in file.message_type[0].field}
    assert fields["started"] == ".google.protobuf.Timestamp" and fields["pickup"] == ".stromtext.Place"
    status, body = call("GET", f"{url}/subjects/text-rides-value/versions/1?format=serialized")
    assert descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"])).package == "stromtext"

    # The same file in other whitespace and comments is the same schema: its id, no new version.
    reformatted = RIDE.replace("// A ride, as a Java producer would register it.\n", "").replace("\n\n", "\n")
    reformatted = reformatted.replace("  int64 ride_id = 1;", "int64   ride_id=1; // the id")
    assert register(url, "text-rides-value", reformatted, [PLACE_REF]) == (200, {"id": ride_id})
    assert call("GET", f"{url}/subjects/text-rides-value/versions")[1] == [1]
    status, body = register(url, "text-rides-value", reformatted, [PLACE_REF], path="")  # lookup
    assert status == 200 and body["id"] == ride_id and body["version"] == 1 and body["schema"] == RIDE
    # ...and so is it in another subject.
    assert register(url, "text-rides-copy", RIDE, [PLACE_REF]) == (200, {"id": ride_id})

    # Through confluent-kafka's client too.
    client = SchemaRegistryClient({"url": url})
    got = client.get_schema(ride_id)
    assert got.schema_type == "PROTOBUF" and got.schema_str == RIDE
    assert [(r.name, r.subject, r.version) for r in got.references] == [tuple(PLACE_REF.values())]
    refs = [SchemaReference(PLACE_REF["name"], PLACE_REF["subject"], 1)]
    assert client.register_schema("text-rides-value", Schema(RIDE, "PROTOBUF", refs)) == ride_id


def test_invalid_text_is_refused_with_protocs_message(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    status, body = register(url, "text-bad-value", 'syntax = "proto3";\nmessage M {\n  int32 = 1;\n}\n')
    assert (status, body["error_code"]) == (422, 42201)
    assert ":3:" in body["message"] and "Expected field name" in body["message"], body
    # An import that no reference names.
    status, body = register(url, "text-bad-value", RIDE)
    assert (status, body["error_code"]) == (422, 42201)
    assert "strom_pt_place.proto" in body["message"], body
    status, body = register(url, "text-bad-value", 'syntax = "proto3";\nmessage M { Missing m = 1; }\n')
    assert (status, body["error_code"]) == (422, 42201) and "Missing" in body["message"], body
    assert call("GET", f"{url}/subjects/text-bad-value/versions")[0] == 404


def test_compatibility_of_text_schemas(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    v1 = 'syntax = "proto3";\npackage compat;\nmessage Trip {\n  int64 id = 1;\n  string driver = 2;\n}\n'
    added = v1.replace("  string driver = 2;\n", "  string driver = 2;\n  int32 speed = 3;\n")
    retyped = v1.replace("string driver = 2;", "double driver = 2;")
    repackaged = v1.replace("package compat;", "package other;")
    subject = "text-trips-value"
    assert register(url, subject, v1)[0] == 200
    check = f"{url}/compatibility/subjects/{subject}/versions/latest?verbose=true"
    status, body = call("POST", check, {"schema": added, "schemaType": "PROTOBUF"})
    assert status == 200 and body["is_compatible"] is True, body
    status, body = call("POST", check, {"schema": retyped, "schemaType": "PROTOBUF"})
    assert status == 200 and body["is_compatible"] is False
    assert any("field 2" in m and "type changed" in m for m in body["messages"]), body
    status, body = call("POST", check, {"schema": repackaged, "schemaType": "PROTOBUF"})
    assert body["is_compatible"] is False and any("package" in m for m in body["messages"]), body

    status, body = register(url, subject, retyped)
    assert (status, body["error_code"]) == (409, 409), body
    status, body = register(url, subject, added)
    assert status == 200
    assert call("GET", f"{url}/subjects/{subject}/versions")[1] == [1, 2]

    # A descriptor checked against text versions (and the other way round): the same rules.
    status, body = call("GET", f"{url}/subjects/{subject}/versions/2?format=serialized")
    serialized_v2 = body["schema"]
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized_v2))
    file.message_type[0].field[0].type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING  # id: int64 -> string
    broken = base64.b64encode(file.SerializeToString()).decode()
    status, body = call("POST", check, {"schema": broken, "schemaType": "PROTOBUF"})
    assert body["is_compatible"] is False and any("field 1" in m for m in body["messages"]), body
    status, body = call("POST", check, {"schema": serialized_v2, "schemaType": "PROTOBUF"})
    assert body["is_compatible"] is True, body
    # The descriptor of version 2 is version 2: its id, no version 3.
    assert register(url, subject, serialized_v2)[1]["id"] == call("GET", f"{url}/subjects/{subject}/versions/2")[1]["id"]
    assert call("GET", f"{url}/subjects/{subject}/versions")[1] == [1, 2]


def _generated(tmp_path: Path) -> Any:
    """protoc's Python classes for RIDE (and OTHER), as an application would have them."""
    (tmp_path / "strom_pt_place.proto").write_text(OTHER)
    (tmp_path / "strom_pt_ride.proto").write_text(RIDE)
    include = str(Path(protoc.__file__).parent / "_proto")
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{include}", f"--python_out={tmp_path}",
                        "strom_pt_place.proto", "strom_pt_ride.proto"]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module("strom_pt_ride_pb2")
    finally:
        sys.path.remove(str(tmp_path))


def test_text_and_serialized_share_an_id_and_python_round_trip(registry: tuple[BrokerProcess, str],
                                                               tmp_path: Path) -> None:
    broker, url = registry
    # A Java producer registered the text (and its import) first.
    place_status, _ = register(url, "strom_pt_place.proto", OTHER)
    assert place_status == 200
    status, body = register(url, "py-rides-value", RIDE, [PLACE_REF])
    assert status == 200
    text_id = body["id"]

    module = _generated(tmp_path)
    ride_cls = module.Ride
    # The descriptor confluent-kafka's Python serializer sends is the same schema: the same id.
    file = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(file)
    serialized = base64.b64encode(file.SerializeToString()).decode()
    client = SchemaRegistryClient({"url": url})
    refs = [SchemaReference(PLACE_REF["name"], PLACE_REF["subject"], 1)]
    assert client.register_schema("py-rides-value", Schema(serialized, "PROTOBUF", refs)) == text_id
    assert client.lookup_schema("py-rides-value", Schema(serialized, "PROTOBUF", refs)).version == 1
    assert call("GET", f"{url}/subjects/py-rides-value/versions")[1] == [1]
    assert call("GET", f"{url}/schemas/ids/{text_id}")[1]["schema"] == RIDE  # still the text

    # Its auto-registration (the import under its file name as subject, as the text's reference
    # names it) finds the text's id; the deserializer reads the serialized form back.
    serializer = ProtobufSerializer(ride_cls, client, {"use.deprecated.format": False})
    ctx = SerializationContext("py-rides", MessageField.VALUE)
    rows = []
    for i in range(10):
        ride = ride_cls(ride_id=i, tags=[f"t{i}"])
        ride.started.FromSeconds(1_700_000_000 + i)
        ride.pickup.city = f"city{i}"
        if i % 2:
            ride.card = f"card{i}"
        else:
            ride.voucher = i
        rows.append(ride)
    values = [serializer(row, ctx) for row in rows]
    assert all(int.from_bytes(v[1:5], "big") == text_id for v in values)
    _produce(broker.bootstrap, "py-rides", values)
    deserializer = ProtobufDeserializer(ride_cls, {"use.deprecated.format": False},
                                        schema_registry_client=SchemaRegistryClient({"url": url}))
    got = [deserializer(v, ctx) for v in _consume(broker.bootstrap, "py-rides", len(rows))]
    assert got == rows
    assert call("GET", f"{url}/subjects/py-rides-value/versions")[1] == [1]
