"""Protobuf schemas, in either of the forms Confluent's registry takes:

- ``.proto`` source text (what Confluent's Java clients, its REST docs and curl users send),
  compiled by protoc (the one grpcio-tools ships, run as ``python -c`` in a subprocess so that its
  messages can be read and a crash cannot take the broker down) into a FileDescriptorProto;
- the serialized form: a FileDescriptorProto, base64-encoded (what confluent-kafka's Python
  ProtobufSerializer registers and what ``?format=serialized`` returns).

Either way the file is then built, with its imports, in a protobuf DescriptorPool. References are
the files it imports, under the reference's name, in either form; the well-known files
(google/protobuf/*.proto) come from protoc's include directory and the protobuf package, as the
clients leave them out of the references.

The canonical form (what decides that two schemas are the same, and so get the same id) is the
file's descriptor, normalized: the file name, source locations (comments), json_name values that
are the default for their field, and ``syntax = "proto2"`` (the default) dropped, then serialized
deterministically and base64-encoded. So a ``.proto`` text and the descriptor the Python client
sends for the same file, or the same text in other whitespace or with other comments, are one
schema."""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from strom.registry.formats import InvalidSchema, ParsedSchema

_WELL_KNOWN = {"any", "api", "descriptor", "duration", "empty", "field_mask", "source_context", "struct",
               "timestamp", "type", "wrappers"}
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")  # .proto text always has ; { or " in it, base64 never
PROTOC_TIMEOUT_S = 30.0
# protoc itself, in-process in a fresh interpreter: argv[1:] are protoc's arguments (argv[1] its name).
_RUN_PROTOC = ("import sys\nfrom grpc_tools import _protoc_compiler\n"
               "sys.exit(_protoc_compiler.run_main([a.encode() for a in sys.argv[1:]]))")



@dataclass(frozen=True, slots=True)
class ProtobufSchema:
    file: descriptor_pb2.FileDescriptorProto  # normalized, named as registered (a text: MAIN_NAME)
    serialized: str  # base64 of ``file``: what ``?format=serialized`` returns


MAIN_NAME = "default.proto"  # a text schema's own file name (the clients rename it anyway)


def is_serialized(text: str) -> bool:
    return _BASE64.fullmatch(text) is not None


def decode(text: str) -> descriptor_pb2.FileDescriptorProto:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        raise InvalidSchema("a Protobuf schema must be .proto text or a base64-encoded FileDescriptorProto") from None


def _include_dir() -> str:
    """protoc's include directory of grpcio-tools: the well-known google/protobuf/*.proto."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or not spec.submodule_search_locations:
        raise InvalidSchema("reading .proto text needs grpcio-tools (protoc), which is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "_proto")


def _compile(text: str, deps: Sequence[descriptor_pb2.FileDescriptorProto]) -> descriptor_pb2.FileDescriptorProto:
    """``text`` compiled by protoc, as the file MAIN_NAME (or another name if a dependency has
    that one), its imports found among ``deps`` (by name) or the well-known files."""
    taken = {d.name for d in deps}
    name = MAIN_NAME
    n = 0
    while name in taken:
        n += 1
        name = f"default{n}.proto"
    with tempfile.TemporaryDirectory(prefix="strom-proto-") as tmp:
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
        args = ["protoc", "-I.", f"-I{_include_dir()}", "--descriptor_set_out=out.pb"]
        if deps:
            with open(os.path.join(tmp, "deps.pb"), "wb") as f:
                f.write(descriptor_pb2.FileDescriptorSet(file=list(deps)).SerializeToString())
            args.append("--descriptor_set_in=deps.pb")
        try:
            proc = subprocess.run([sys.executable, "-c", _RUN_PROTOC, *args, name], cwd=tmp, capture_output=True,
                                  text=True, timeout=PROTOC_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise InvalidSchema(f"protoc did not finish within {PROTOC_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.strip()]
            raise InvalidSchema("; ".join(errors[:10]) or f"protoc failed (exit {proc.returncode})")
        with open(os.path.join(tmp, "out.pb"), "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    return files[-1]


@functools.lru_cache(maxsize=1024)
def _compile_cached(text: str, deps: tuple[bytes, ...]) -> bytes:
    return _compile(text, [descriptor_pb2.FileDescriptorProto.FromString(d) for d in deps]).SerializeToString()


def default_json_name(name: str) -> str:
    """protobuf's default json_name: underscores dropped, the letter after one upper-cased."""
    out: list[str] = []
    upper = False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def _normalize_fields(fields: Iterable[descriptor_pb2.FieldDescriptorProto]) -> None:
    for field in fields:
        if field.HasField("json_name") and field.json_name == default_json_name(field.name):
            field.ClearField("json_name")


def _normalize_messages(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for m in messages:
        _normalize_fields(m.field)
        _normalize_fields(m.extension)
        _normalize_messages(m.nested_type)


def normalize(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """What is the same for one file however it came (protoc fills json_name and source locations,
    the Python clients' generated descriptors do not)."""
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(file)
    out.ClearField("source_code_info")
    if out.syntax == "proto2":
        out.ClearField("syntax")
    _normalize_fields(out.extension)
    _normalize_messages(out.message_type)
    return out


def to_descriptor(text: str, deps: Sequence[descriptor_pb2.FileDescriptorProto]) -> descriptor_pb2.FileDescriptorProto:
    """A schema in either form as a descriptor (normalized)."""
    if is_serialized(text):
        return normalize(decode(text))
    raw = _compile_cached(text, tuple(d.SerializeToString(deterministic=True) for d in deps))
    return normalize(descriptor_pb2.FileDescriptorProto.FromString(raw))


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
    if not name.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _b64(file: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.standard_b64encode(file.SerializeToString(deterministic=True)).decode("ascii")


def parse(text: str, references: Sequence[tuple[str, str]] = ()) -> ParsedSchema:
    """``references``: (import name, schema text, either form) of the files this one imports,
    dependencies first."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    deps: list[descriptor_pb2.FileDescriptorProto] = []

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
            if name in added:
                continue  # reached twice through the references' own references
            ref = to_descriptor(ref_text, deps)
            ref.name = name  # imported under the reference's name
            add(ref)
            deps.append(ref)
        main = to_descriptor(text, deps)
        add(main)
        pool.FindFileByName(main.name)  # builds it: unknown types and imports fail here
    except InvalidSchema:
        raise
    except Exception as e:  # protobuf raises TypeError or its own errors for a bad descriptor
        raise InvalidSchema(f"{type(e).__name__}: {e}") from None
    nameless = descriptor_pb2.FileDescriptorProto()
    nameless.CopyFrom(main)
    nameless.ClearField("name")
    # Stored: a text as given; a descriptor as given, re-encoded (deterministic).
    stored = text if not is_serialized(text) else _b64(decode(text))
    return ParsedSchema("PROTOBUF", _b64(nameless), ProtobufSchema(main, _b64(main)), stored)
