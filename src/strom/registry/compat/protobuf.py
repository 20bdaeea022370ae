"""Protobuf compatibility as Confluent checks it: by field number; a message may not disappear or
change package; a field may not change to a wire-incompatible type, between singular and repeated,
or into an existing oneof; proto2 required fields may not be added or removed. Fields added or
removed otherwise, renamed fields and new enum values are compatible."""

from __future__ import annotations

from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto

from strom.registry.formats.protobuf import ProtobufSchema

F = FieldDescriptorProto
# Wire-compatible scalar types (same encoding): a change inside one group is compatible.
_GROUPS = [
    {F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_BOOL},
    {F.TYPE_SINT32, F.TYPE_SINT64},
    {F.TYPE_FIXED32, F.TYPE_SFIXED32},
    {F.TYPE_FIXED64, F.TYPE_SFIXED64},
    {F.TYPE_STRING, F.TYPE_BYTES},
]


def _messages(prefix: str, messages: list[DescriptorProto], out: dict[str, DescriptorProto]) -> None:
    for m in messages:
        name = f"{prefix}.{m.name}" if prefix else m.name
        out[name] = m
        _messages(name, list(m.nested_type), out)


def _compatible_types(a: FieldDescriptorProto, b: FieldDescriptorProto) -> bool:
    if a.type == b.type:
        if a.type in (F.TYPE_MESSAGE, F.TYPE_ENUM, F.TYPE_GROUP):
            return a.type_name.rpartition(".")[2] == b.type_name.rpartition(".")[2]
        return True
    return any(a.type in g and b.type in g for g in _GROUPS)


def incompatibilities(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    new, old = reader.file, writer.file
    out: list[str] = []
    if new.package != old.package:
        out.append(f"package changed from '{old.package}' to '{new.package}'")
    new_msgs: dict[str, DescriptorProto] = {}
    old_msgs: dict[str, DescriptorProto] = {}
    _messages("", list(new.message_type), new_msgs)
    _messages("", list(old.message_type), old_msgs)
    for name, old_msg in old_msgs.items():
        new_msg = new_msgs.get(name)
        if new_msg is None:
            out.append(f"message {name} removed")
            continue
        out += _message(name, new_msg, old_msg)
    return out


def _message(name: str, new: DescriptorProto, old: DescriptorProto) -> list[str]:
    out: list[str] = []
    new_fields = {f.number: f for f in new.field}
    old_fields = {f.number: f for f in old.field}
    moved_to_new_oneof = 0
    for number, of in old_fields.items():
        nf = new_fields.get(number)
        where = f"{name} field {number}"
        if nf is None:
            if of.label == F.LABEL_REQUIRED:
                out.append(f"{where}: required field removed")
            continue
        if not _compatible_types(nf, of):
            out.append(f"{where}: type changed")
        if (nf.label == F.LABEL_REPEATED) != (of.label == F.LABEL_REPEATED):
            out.append(f"{where}: changed between singular and repeated")
        new_oneof = nf.HasField("oneof_index") and not nf.proto3_optional
        old_oneof = of.HasField("oneof_index") and not of.proto3_optional
        if new_oneof and not old_oneof:
            oneof_name = new.oneof_decl[nf.oneof_index].name
            if any(o.name == oneof_name for o in old.oneof_decl):
                out.append(f"{where}: moved into the existing oneof {oneof_name}")
            else:
                moved_to_new_oneof += 1
    if moved_to_new_oneof > 1:
        out.append(f"{name}: several fields moved into a new oneof")
    for number, nf in new_fields.items():
        if number not in old_fields and nf.label == F.LABEL_REQUIRED:
            out.append(f"{name} field {number}: required field added")
    return out
