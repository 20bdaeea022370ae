"""The Protobuf printer (strom.registry.formats.proto_text): a FileDescriptorProto printed as .proto
text and compiled back by protoc (grpcio-tools) is the same descriptor; and the registry answers a
schema that confluent-kafka's ProtobufSerializer registered as a serialized descriptor with that text
by default (as Confluent's registry does), base64 with ?format=serialized, and registering the text
gives the same id."""

from __future__ import annotations

import base64
import urllib.request

import pytest
from brokerproc import BrokerProcess
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from google.protobuf import descriptor_pb2
from test_registry_protobuf_text import register
from test_schema_registry import call

from strom.registry.formats import protobuf
from strom.registry.formats.proto_text import to_text

pytestmark = pytest.mark.timeout(180)

COMMON = """syntax = "proto3";
package strom.common;

message Money {
  string currency = 1;
  int64 units = 2;
}

enum Level {
  LEVEL_UNSPECIFIED = 0;
  LOW = 1;
}
"""

PROTO3 = """syntax = "proto3";
package strom.orders.v1;

import "google/protobuf/timestamp.proto";
import public "common.proto";
import "google/protobuf/descriptor.proto";

option java_package = "io.strom.orders";
option java_multiple_files = true;
option go_package = "example.com/orders;orders";
option optimize_for = SPEED;

// An order, with everything the printer writes.
message Order {
  option deprecated = true;
  int64 id = 1;
  string customer_name = 2 [json_name = "customer"];
  repeated int32 quantities = 3 [packed = false];
  map<string, int64> counts = 4;
  map<int32, Line> lines = 5;
  optional string note = 6;
  google.protobuf.Timestamp placed = 7;
  strom.common.Money total = 8;
  Status status = 9 [deprecated = true];
  oneof payment {
    string card = 10;
    Voucher voucher = 11;
  }
  bytes blob = 12;
  strom.common.Level level = 13;
  reserved 20, 22 to 25, 100 to max;
  reserved "old", "older";

  message Line {
    string sku = 1;
    double price = 2;
    map<string, Line> children = 3;
    enum Kind {
      option allow_alias = true;
      KIND_UNSPECIFIED = 0;
      GOOD = 1;
      FINE = 1;
      BAD = 2 [deprecated = true];
      reserved 10 to 20, 30;
      reserved "UGLY";
    }
    Kind kind = 4;
  }
  message Voucher {
    string code = 1;
  }
  enum Status {
    STATUS_UNSPECIFIED = 0;
    OPEN = 1;
  }
}

message Empty {}

extend google.protobuf.FieldOptions {
  string strom_label = 50001;
}

service Orders {
  rpc Place(Order) returns (Order);
  rpc Watch(Empty) returns (stream Order) {
    option deprecated = true;
  }
  rpc Upload(stream Order.Line) returns (Empty);
}
"""

PROTO2 = """syntax = "proto2";
package strom.legacy;

message Reading {
  required string sensor = 1;
  optional double value = 2 [default = -1.5];
  optional string unit = 3 [default = "cel\\"sius\\n"];
  optional bytes raw = 4 [default = "\\001\\377x"];
  optional Mode mode = 5 [default = FAST];
  optional bool on = 6 [default = true];
  optional float ratio = 7 [default = inf];
  repeated int64 history = 8 [packed = true];
  optional uint64 big = 9 [default = 18446744073709551615];
  optional sint32 delta = 10 [default = -3];
  oneof source {
    string device = 11;
    int32 port = 12;
  }
  extensions 100 to 199, 1000 to max;
  enum Mode {
    SLOW = 0;
    FAST = 1;
  }
}

extend Reading {
  optional string tag = 100;
  repeated int32 marks = 101;
}

message Holder {
  extend Reading {
    optional Holder holder = 102;
  }
  optional fixed32 a = 1;
  optional fixed64 b = 2;
  optional sfixed32 c = 3;
  optional sfixed64 d = 4;
  optional uint32 e = 5;
  optional int32 f = 6 [deprecated = true, json_name = "eff"];
  map<string, string> attrs = 7;
}
"""

NO_PACKAGE = """syntax = "proto3";

message Plain {
  string a = 1;
  .Plain child = 2;
}
"""


def compiled(text: str, deps: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pb2.FileDescriptorProto:
    file = protobuf.normalize(protobuf._compile(text, deps))
    file.ClearField("name")
    return file


@pytest.fixture(scope="module")
def common() -> descriptor_pb2.FileDescriptorProto:
    file = protobuf._compile(COMMON, [])
    file.name = "common.proto"
    return file


@pytest.mark.parametrize("text", [PROTO3, PROTO2, NO_PACKAGE, COMMON], ids=["proto3", "proto2", "no-package",
                                                                             "enums"])
def test_printed_text_compiles_to_the_same_descriptor(text: str, common: descriptor_pb2.FileDescriptorProto) -> None:
    deps = [common, protobuf._well_known("google/protobuf/timestamp.proto"),
            protobuf._well_known("google/protobuf/descriptor.proto")]
    deps = [d for d in deps if d is not None]
    want = compiled(text, deps)
    printed = to_text(want)
    assert printed is not None
    assert compiled(printed, deps) == want, printed
    # printing is a fixed point: the text of the compiled text is the text
    assert to_text(compiled(printed, deps)) == printed


def test_what_is_not_printed() -> None:
    groups = compiled('syntax = "proto2";\nmessage G {\n  optional group Item = 1 {\n    optional int32 n = 2;\n  }\n}\n',
                      [])
    assert to_text(groups) is None
    editions = descriptor_pb2.FileDescriptorProto(syntax="editions", name="e.proto")
    assert to_text(editions) is None


def test_custom_options_are_left_out() -> None:
    """A custom option is an extension the descriptor alone cannot name: the text leaves it out,
    so it is not the same schema (the registry then answers the descriptor as it was given)."""
    descriptor = protobuf._well_known("google/protobuf/descriptor.proto")
    assert descriptor is not None
    text = ('syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\n'
            "extend google.protobuf.MessageOptions { string note = 50002; }\n"
            'message M {\n  option (note) = "hi";\n  string a = 1;\n}\n')
    file = compiled(text, [descriptor])
    printed = to_text(file)
    assert printed is not None and "note" in printed and '"hi"' not in printed
    assert compiled(printed, [descriptor]) != file


@pytest.fixture(scope="module")
def registry(registry_broker: BrokerProcess) -> tuple[BrokerProcess, str]:
    return registry_broker, registry_broker.registry_url


def test_a_serialized_descriptor_is_answered_as_text(registry: tuple[BrokerProcess, str],
                                                     common: descriptor_pb2.FileDescriptorProto) -> None:
    _, url = registry
    client = SchemaRegistryClient({"url": url})
    common_b64 = base64.b64encode(common.SerializeToString()).decode()
    common_id = client.register_schema("common.proto", Schema(common_b64, "PROTOBUF"))
    orders = protobuf._compile(PROTO3, [common, protobuf._well_known("google/protobuf/timestamp.proto"),
                                        protobuf._well_known("google/protobuf/descriptor.proto")])
    orders.name = "strom/orders.proto"
    orders.ClearField("source_code_info")  # as a generated module's descriptor is
    serialized = base64.b64encode(orders.SerializeToString()).decode()
    refs = [SchemaReference("common.proto", "common.proto", 1)]
    orders_id = client.register_schema("orders-value", Schema(serialized, "PROTOBUF", refs))

    # Text by default, by id and by version; the descriptor with ?format=serialized.
    status, body = call("GET", f"{url}/schemas/ids/{orders_id}")
    assert status == 200 and not protobuf.is_serialized(body["schema"])
    text = body["schema"]
    assert text.startswith('syntax = "proto3";\npackage strom.orders.v1;\n') and "map<string, int64> counts = 4;" in text
    assert call("GET", f"{url}/subjects/orders-value/versions/1")[1]["schema"] == text
    with urllib.request.urlopen(f"{url}/schemas/ids/{orders_id}/schema", timeout=30) as resp:
        assert resp.read().decode() == text
    status, body = call("GET", f"{url}/schemas/ids/{orders_id}?format=serialized")
    assert protobuf.is_serialized(body["schema"])
    assert descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"])) == orders
    assert call("GET", f"{url}/schemas/ids/{common_id}")[1]["schema"] == to_text(protobuf.decode(common_b64))

    # Registering the printed text is the same schema: its id, no new version.
    ref = [{"name": "common.proto", "subject": "common.proto", "version": 1}]
    assert register(url, "orders-value", text, ref) == (200, {"id": orders_id})
    assert register(url, "orders-text-copy", text, ref) == (200, {"id": orders_id})
    assert call("GET", f"{url}/subjects/orders-value/versions")[1] == [1]
    # confluent-kafka's client reads it back as its serializer needs it
    got = client.get_schema(orders_id, fmt="serialized")
    assert descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(got.schema_str)) == orders


def test_a_descriptor_the_text_cannot_carry_stays_base64(registry: tuple[BrokerProcess, str]) -> None:
    _, url = registry
    file = protobuf._compile('syntax = "proto2";\nmessage G {\n  optional group Item = 1 {\n'
                             "    optional int32 n = 2;\n  }\n}\n", [])
    serialized = base64.b64encode(file.SerializeToString()).decode()
    schema_id = SchemaRegistryClient({"url": url}).register_schema("groups-value", Schema(serialized, "PROTOBUF"))
    assert call("GET", f"{url}/schemas/ids/{schema_id}")[1]["schema"] == serialized
