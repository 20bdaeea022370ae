"""Protobuf schemas in their serialized form: a FileDescriptorProto, base64-encoded (what
confluent-kafka's ProtobufSerializer registers and what ``?format=serialized`` returns), checked by
building it, with its imports, in a protobuf DescriptorPool. The well-known files
(google/protobuf/*.proto) come from the protobuf package itself, as the clients leave them out of
the references."""

from __future__ import annotations

import base64
import binascii
import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from strom.registry.formats import InvalidSchema, ParsedSchema

_WELL_KNOWN = {"any", "api", "descriptor", "duration", "empty", "field_mask", "source_context", "struct",
               "timestamp", "type", "wrappers"}


@dataclass(frozen=True, slots=True)
class ProtobufSchema:
    file: descriptor_pb2.FileDescriptorProto


def decode(text: str) -> descriptor_pb2.FileDescriptorProto:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        raise InvalidSchema("a Protobuf schema must be a base64-encoded FileDescriptorProto (the form "
                            "confluent-kafka's ProtobufSerializer registers); .proto text is not read") from None


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
    if not name.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def parse(text: str, references: Sequence[tuple[str, str]] = ()) -> ParsedSchema:
    """``references``: (import name, schema text) of the files this one imports, dependencies first."""
    main = decode(text)
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(proto: descriptor_pb2.FileDescriptorProto) -> None:
        for dep in proto.dependency:
            if dep not in added:
                known = _well_known(dep)
                if known is not None:
                    add(known)
        if proto.name not in added:
            pool.Add(proto)
            added.add(proto.name)

    try:
        for name, ref_text in references:
            ref = decode(ref_text)
            ref.name = name  # imported under the reference's name
            add(ref)
        add(main)
        pool.FindFileByName(main.name)  # builds it: unknown types and imports fail here
    except InvalidSchema:
        raise
    except Exception as e:  # protobuf raises TypeError or its own errors for a bad descriptor
        raise InvalidSchema(f"{type(e).__name__}: {e}") from None
    canonical = base64.standard_b64encode(main.SerializeToString(deterministic=True)).decode("ascii")
    return ParsedSchema("PROTOBUF", canonical, ProtobufSchema(main))
