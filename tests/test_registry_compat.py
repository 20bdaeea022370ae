"""Compatibility verdicts of the schema registry, per level, for Avro, JSON Schema and Protobuf: the
cases Confluent documents ("Schema Evolution and Compatibility": which changes each level allows),
checked on the pure checker (strom.registry.compat); the REST API's own checks are in
test_schema_registry.py."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2

from strom.registry import compat
from strom.registry import records as rec
from strom.registry.formats import InvalidSchema
from strom.registry.formats.parse import parse
from strom.registry.state import RegistryState


def avro(*fields: dict[str, object], name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "example", "fields": list(fields)})


A = {"name": "a", "type": "int"}
B_REQUIRED = {"name": "b", "type": "string"}
B_OPTIONAL = {"name": "b", "type": "string", "default": "x"}

# (what, old, new, {level: compatible})
AVRO_CASES = [
    ("add a field with a default", avro(A), avro(A, B_OPTIONAL),
     {"BACKWARD": True, "FORWARD": True, "FULL": True, "NONE": True}),
    ("add a field without a default", avro(A), avro(A, B_REQUIRED),
     {"BACKWARD": False, "FORWARD": True, "FULL": False, "NONE": True}),
    ("delete a field with a default", avro(A, B_OPTIONAL), avro(A),
     {"BACKWARD": True, "FORWARD": True, "FULL": True, "NONE": True}),
    ("delete a field without a default", avro(A, B_REQUIRED), avro(A),
     {"BACKWARD": True, "FORWARD": False, "FULL": False, "NONE": True}),
    ("promote int to long", avro(A), avro({"name": "a", "type": "long"}),
     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    ("change int to string", avro(A), avro({"name": "a", "type": "string"}),
     {"BACKWARD": False, "FORWARD": False, "NONE": True}),
    ("rename a field, the old name an alias", avro(A), avro({"name": "z", "type": "int", "aliases": ["a"]}),
     {"BACKWARD": True}),
    ("rename a field without an alias", avro(A), avro({"name": "z", "type": "int"}),
     {"BACKWARD": False, "FORWARD": False}),
    ("widen to a union with null", avro(A), avro({"name": "a", "type": ["null", "int"], "default": None}),
     {"BACKWARD": True, "FORWARD": False}),
    ("add an enum symbol",
     avro({"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}}),
     avro({"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}}),
     {"BACKWARD": True, "FORWARD": False}),
    ("rename the record, the old name an alias", avro(A),
     json.dumps({"type": "record", "name": "Person", "namespace": "example", "aliases": ["User"], "fields": [A]}),
     {"BACKWARD": True}),
]


def verdict(level: str, old: list[str], new: str, schema_type: str = "AVRO") -> bool:
    existing = [parse(schema_type, s) for s in old]
    return not compat.check(level, parse(schema_type, new), existing)


@pytest.mark.parametrize(("what", "old", "new", "expected"), AVRO_CASES, ids=[c[0] for c in AVRO_CASES])
def test_avro_levels(what: str, old: str, new: str, expected: dict[str, bool]) -> None:
    for level, compatible in expected.items():
        assert verdict(level, [old], new) is compatible, f"{what} under {level}"
        # One earlier version: a transitive level gives the same verdict.
        if level != "NONE":
            assert verdict(level + "_TRANSITIVE", [old], new) is compatible


def test_transitive_levels_check_every_version() -> None:
    v1 = avro(A)
    v2 = avro(B_OPTIONAL)  # a deleted: backward compatible with v1
    v3 = avro(B_OPTIONAL, {"name": "a", "type": "string", "default": ""})  # reads v2, not v1's int a
    assert verdict("BACKWARD", [v1, v2], v3)
    assert not verdict("BACKWARD_TRANSITIVE", [v1, v2], v3)
    assert verdict("FULL", [v1, v2], v3)
    assert not verdict("FULL_TRANSITIVE", [v1, v2], v3)
    # FORWARD: v1 reads v2? v1 needs a (no default) and v2 has none: not even v2 against v1.
    assert not verdict("FORWARD_TRANSITIVE", [v1, v2], v3)


def test_avro_canonical_form_ignores_whitespace_and_validates_defaults() -> None:
    one = parse("AVRO", avro(A, B_OPTIONAL))
    spaced = parse("AVRO", json.dumps(json.loads(avro(A, B_OPTIONAL)), indent=4))
    assert one.canonical == spaced.canonical
    with pytest.raises(InvalidSchema, match="Default"):
        parse("AVRO", avro({"name": "a", "type": "int", "default": "not an int"}))
    with pytest.raises(InvalidSchema):
        parse("AVRO", avro({"name": "a", "type": "NoSuchType"}))
    with pytest.raises(InvalidSchema):
        parse("AVRO", "{not json")


def js(properties: dict[str, object], required: list[str] | None = None, closed: bool = False, **extra: object) -> str:
    schema: dict[str, object] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


STR = {"type": "string"}
JSON_CASES = [
    ("add a property to an open content model", js({"a": STR}), js({"a": STR, "b": STR}),
     {"BACKWARD": False, "FORWARD": True}),
    ("add a property to a closed content model", js({"a": STR}, closed=True), js({"a": STR, "b": STR}, closed=True),
     {"BACKWARD": True, "FORWARD": False}),
    ("remove a property from an open content model", js({"a": STR, "b": STR}), js({"a": STR}),
     {"BACKWARD": True, "FORWARD": False}),
    ("add a required property", js({"a": STR}, closed=True), js({"a": STR, "b": STR}, ["b"], closed=True),
     {"BACKWARD": False}),
    ("narrow a type", js({"a": {"type": ["string", "null"]}}), js({"a": STR}),
     {"BACKWARD": False, "FORWARD": True}),
    ("lower maxLength", js({"a": {"type": "string", "maxLength": 10}}), js({"a": {"type": "string", "maxLength": 5}}),
     {"BACKWARD": False, "FORWARD": True, "FULL": False, "NONE": True}),
    ("close an open content model", js({"a": STR}), js({"a": STR}, closed=True),
     {"BACKWARD": False, "FORWARD": True}),
    ("widen an enum", js({"a": {"enum": ["x"]}}), js({"a": {"enum": ["x", "y"]}}),
     {"BACKWARD": True, "FORWARD": False}),
]


@pytest.mark.parametrize(("what", "old", "new", "expected"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_schema_levels(what: str, old: str, new: str, expected: dict[str, bool]) -> None:
    for level, compatible in expected.items():
        assert verdict(level, [old], new, "JSON") is compatible, f"{what} under {level}"


def test_json_schema_is_checked_against_its_metaschema() -> None:
    with pytest.raises(InvalidSchema):
        parse("JSON", json.dumps({"type": "no-such-type"}))
    assert parse("JSON", js({"a": STR})).canonical == parse("JSON", json.dumps(json.loads(js({"a": STR})),
                                                                                 indent=2)).canonical


F = descriptor_pb2.FieldDescriptorProto


def proto(fields: list[tuple[str, int, int]], package: str = "example", oneof: list[str] | None = None,
          extra_message: bool = False) -> str:
    """A file with message M: (name, number, type) fields; ``oneof``: fields inside oneof ``choice``."""
    file = descriptor_pb2.FileDescriptorProto(name="m.proto", package=package, syntax="proto3")
    msg = file.message_type.add(name="M")
    if oneof:
        msg.oneof_decl.add(name="choice")
    for name, number, kind in fields:
        field = msg.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)  # type: ignore[arg-type]
        if oneof and name in oneof:
            field.oneof_index = 0
    if extra_message:
        file.message_type.add(name="Other")
    return base64.b64encode(file.SerializeToString()).decode()


PROTO_CASES = [
    ("add a field", proto([("a", 1, F.TYPE_STRING)]), proto([("a", 1, F.TYPE_STRING), ("b", 2, F.TYPE_INT32)]),
     {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    ("remove a field", proto([("a", 1, F.TYPE_STRING), ("b", 2, F.TYPE_INT32)]), proto([("a", 1, F.TYPE_STRING)]),
     {"BACKWARD": True, "FULL": True}),
    ("rename a field", proto([("a", 1, F.TYPE_STRING)]), proto([("z", 1, F.TYPE_STRING)]), {"FULL": True}),
    ("int32 to int64", proto([("a", 1, F.TYPE_INT32)]), proto([("a", 1, F.TYPE_INT64)]), {"FULL": True}),
    ("int32 to string", proto([("a", 1, F.TYPE_INT32)]), proto([("a", 1, F.TYPE_STRING)]),
     {"BACKWARD": False, "FORWARD": False, "NONE": True}),
    ("change the package", proto([("a", 1, F.TYPE_INT32)]), proto([("a", 1, F.TYPE_INT32)], package="other"),
     {"BACKWARD": False}),
    ("remove a message", proto([("a", 1, F.TYPE_INT32)], extra_message=True), proto([("a", 1, F.TYPE_INT32)]),
     {"BACKWARD": False}),
    ("move a field into an existing oneof",
     proto([("a", 1, F.TYPE_INT32), ("b", 2, F.TYPE_INT32)], oneof=["a"]),
     proto([("a", 1, F.TYPE_INT32), ("b", 2, F.TYPE_INT32)], oneof=["a", "b"]), {"BACKWARD": False}),
]


@pytest.mark.parametrize(("what", "old", "new", "expected"), PROTO_CASES, ids=[c[0] for c in PROTO_CASES])
def test_protobuf_levels(what: str, old: str, new: str, expected: dict[str, bool]) -> None:
    for level, compatible in expected.items():
        assert verdict(level, [old], new, "PROTOBUF") is compatible, f"{what} under {level}"


def test_protobuf_needs_a_buildable_descriptor() -> None:
    with pytest.raises(InvalidSchema, match="Expected"):  # protoc's own message, with line and column
        parse("PROTOBUF", 'syntax = "proto3"; message M { int32 = 1; }')
    with pytest.raises(InvalidSchema, match="FileDescriptorProto"):
        parse("PROTOBUF", "bm90IGEgZGVzY3JpcHRvcg==")  # base64, but no FileDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="m.proto", syntax="proto3")
    file.message_type.add(name="M").field.add(name="x", number=1, type=F.TYPE_MESSAGE, type_name=".Missing",
                                             label=F.LABEL_OPTIONAL)
    with pytest.raises(InvalidSchema):
        parse("PROTOBUF", base64.b64encode(file.SerializeToString()).decode())
    # Imports of the well-known files are found without references.
    file = descriptor_pb2.FileDescriptorProto(name="t.proto", syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    file.message_type.add(name="T").field.add(name="at", number=1, type=F.TYPE_MESSAGE,
                                              type_name=".google.protobuf.Timestamp", label=F.LABEL_OPTIONAL)
    parse("PROTOBUF", base64.b64encode(file.SerializeToString()).decode())


def test_state_replays_confluent_records() -> None:
    state = RegistryState()
    v1 = rec.SchemaValue("s", 1, 7, avro(A))
    state.apply(rec.schema_key("s", 1), rec.schema_value(v1))
    state.apply(rec.schema_key("s", 2), rec.schema_value(rec.SchemaValue("s", 2, 8, avro(A, B_OPTIONAL))))
    state.apply(rec.config_key(None), rec.config_value("FULL"))
    state.apply(rec.config_key("s"), rec.config_value("NONE"))
    state.apply(rec.mode_key(None), rec.mode_value("READONLY"))
    assert [sv.version for sv in state.live("s")] == [1, 2] and state.max_id == 8
    assert state.configs == {None: "FULL", "s": "NONE"} and state.modes == {None: "READONLY"}
    state.apply(rec.delete_subject_key("s"), rec.delete_subject_value("s", 2))
    assert state.live("s") == [] and len(state.versions("s", deleted=True)) == 2
    state.apply(rec.noop_key(), rec.max_id_value(8))
    state.apply(rec.schema_key("s", 1), None)
    state.apply(rec.schema_key("s", 2), None)
    state.apply(rec.config_key("s"), None)
    assert "s" not in state.subjects and state.max_id == 8 and state.configs == {None: "FULL"}
    state.apply(b"not json", b"{}")  # skipped, as Confluent's reader skips it
    assert json.loads(rec.schema_key("s", 3)) == {"keytype": "SCHEMA", "subject": "s", "version": 3, "magic": 1}
