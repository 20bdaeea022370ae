"""``strom schemas list|get|register|delete|config``: the schema registry (strom's own, served by the
broker on schema.registry.listeners, or any Confluent-compatible one) through confluent-kafka's
SchemaRegistryClient, over its REST API.

Security as the registry takes it: ``https://`` URLs with ``-X ssl.ca.location=...`` (and
``ssl.certificate.location`` / ``ssl.key.location`` for a client certificate), HTTP Basic with
``-X basic.auth.user.info=USER:PASSWORD``; ``-X sasl.username=... -X sasl.password=...`` (the
broker's SASL users, as the other commands give them) are taken as the Basic credentials.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table

from strom.cli.common import Failure, StromGroup, out_console, parse_key_values

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
REGISTRY_ENVVAR = "STROM_SCHEMA_REGISTRY_URL"
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
TYPES = ("AVRO", "JSON", "PROTOBUF")
CLIENT_KEYS = ("basic.auth.user.info", "basic.auth.credentials.source", "ssl.ca.location", "ssl.certificate.location",
               "ssl.key.location", "ssl.key.password", "timeout", "max.retries")
T = TypeVar("T")


def client_config(url: str, properties: list[tuple[str, str]]) -> dict[str, Any]:
    """SchemaRegistryClient settings from --registry and -X: its own keys pass through; the SASL
    username and password become HTTP Basic credentials; anything else is refused by name."""
    config: dict[str, Any] = {"url": url}
    props = dict(properties)
    user, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    if user is not None or password is not None:
        if user is None or password is None:
            raise click.UsageError("-X sasl.username and -X sasl.password go together")
        config["basic.auth.user.info"] = f"{user}:{password}"
    for key, value in props.items():
        if key not in CLIENT_KEYS:
            raise click.UsageError(f"-X {key}: not a schema registry client setting (known: {', '.join(CLIENT_KEYS)}, "
                                   "sasl.username, sasl.password)")
        config[key] = int(value) if key in ("timeout", "max.retries") else value
    config.setdefault("timeout", 10)
    config.setdefault("max.retries", 0)
    return config


def _registry_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("-X", "--property", "properties", multiple=True, metavar="KEY=VALUE",
                     help="Registry client setting (repeatable): ssl.ca.location, basic.auth.user.info, "
                          "sasl.username/sasl.password, ...")(f)
    return click.option("--registry", "registry_url", default=DEFAULT_REGISTRY, show_default=True,
                        envvar=REGISTRY_ENVVAR, show_envvar=True, metavar="URL",
                        help="The schema registry (the broker's schema.registry.listeners).")(f)


@click.group(cls=StromGroup, no_args_is_help=True)
def schemas() -> None:
    """Subjects, versions, schemas and compatibility levels in the schema registry."""


@contextmanager
def _registry(url: str, properties: tuple[str, ...]) -> Iterator[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient(client_config(url, parse_key_values(properties, "-X/--property")))
    try:
        yield client
    finally:
        client.close()


def _call(url: str, what: str, fn: Callable[[], T]) -> T:
    """One registry call: a refusal or an unreachable registry is one line."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return fn()
    except SchemaRegistryError as e:
        raise Failure(f"cannot {what}: {e.error_message} (error {e.error_code})") from None
    except (OSError, ValueError) as e:
        raise Failure(f"cannot {what}: {e}") from None
    except Exception as e:  # httpx's transport errors: no registry at the URL
        if type(e).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise Failure(f"cannot {what}: no schema registry answers at {url} ({type(e).__name__}: {e})") from None
        raise


def _schema_text(schema: Any) -> str:
    """Avro and JSON schemas pretty-printed; Protobuf as the registry gives it."""
    try:
        return json.dumps(json.loads(schema.schema_str), indent=2)
    except ValueError:
        return str(schema.schema_str)


@schemas.command("list")
@click.option("--prefix", default=None, help="Only subjects that start with this.")
@click.option("--deleted", is_flag=True, help="Include soft-deleted subjects.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_registry_options
def list_(prefix: str | None, deleted: bool, as_json: bool, registry_url: str, properties: tuple[str, ...]) -> None:
    """List subjects: versions, the latest version's id and type, the compatibility level."""
    rows = []
    with _registry(registry_url, properties) as client:
        for subject in _call(registry_url, "list subjects", lambda: client.get_subjects(prefix, deleted)):
            rows.append(_call(registry_url, f"read {subject}", functools.partial(_subject_row, client, subject)))
    if as_json:
        click.echo(json.dumps(rows))
        return
    table = Table()
    for col in ("subject", "versions", "latest", "id", "type", "compatibility"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["subject"], ",".join(map(str, r["versions"])) or "-", str(r["latest"] or "-"),
                      str(r["id"] or "-"), r["type"] or "-", r["compatibility"])
    out_console().print(table)


def _subject_row(client: Any, subject: str) -> dict[str, Any]:
    versions = client.get_versions(subject)
    latest = client.get_latest_version(subject) if versions else None
    return {"subject": subject, "versions": versions, "latest": latest.version if latest else None,
            "id": latest.schema_id if latest else None,
            "type": (latest.schema.schema_type or "AVRO") if latest else None, "compatibility": _level(client, subject)}


def _level(client: Any, subject: str | None) -> str:
    """The level in force: the subject's own, else the global one (as the registry applies them)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if subject is not None:
        try:
            return str(client.get_compatibility(subject))
        except SchemaRegistryError as e:
            if e.error_code != 40408:  # no subject-level compatibility
                raise
    return str(client.get_compatibility())


@schemas.command()
@click.argument("subject", required=False)
@click.option("--version", "version", default="latest", show_default=True, help="A version number, or latest.")
@click.option("--id", "schema_id", type=int, default=None, help="The schema with this id (no SUBJECT).")
@click.option("--json", "as_json", is_flag=True, help="Print the registry's JSON.")
@_registry_options
def get(subject: str | None, version: str, schema_id: int | None, as_json: bool, registry_url: str,
        properties: tuple[str, ...]) -> None:
    """Show a subject's version (default: the latest), or the schema with --id."""
    if (subject is None) == (schema_id is None):
        raise click.UsageError("give a SUBJECT or --id ID")
    with _registry(registry_url, properties) as client:
        if schema_id is not None:
            schema = _call(registry_url, f"read schema id {schema_id}", lambda: client.get_schema(schema_id))
            info: dict[str, Any] = {"id": schema_id, "schemaType": schema.schema_type or "AVRO"}
        else:
            assert subject is not None
            v: int | str = version if version == "latest" else _version(version)
            registered = _call(registry_url, f"read {subject} version {version}",
                               lambda: client.get_version(subject, v))
            schema = registered.schema
            info = {"subject": subject, "version": registered.version, "id": registered.schema_id,
                    "schemaType": schema.schema_type or "AVRO"}
    if schema.references:
        info["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references]
    if as_json:
        click.echo(json.dumps({**info, "schema": schema.schema_str}))
        return
    click.echo(" ".join(f"{k} {v}" for k, v in info.items() if k != "references"))
    for r in info.get("references", []):
        click.echo(f"reference {r['name']} -> {r['subject']} version {r['version']}")
    click.echo(_schema_text(schema))


def _version(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"expected a number or latest, got {text!r}", param_hint="--version") from None


@schemas.command()
@click.argument("subject")
@click.argument("schema_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
                required=False)
@click.option("--schema", "schema_text", default=None, help="The schema itself (instead of SCHEMA_FILE).")
@click.option("--type", "schema_type", type=click.Choice(TYPES, case_sensitive=False), default="AVRO",
              show_default=True)
@click.option("--reference", "references", multiple=True, metavar="NAME=SUBJECT:VERSION",
              help="A schema this one refers to (repeatable).")
@_registry_options
def register(subject: str, schema_file: Path | None, schema_text: str | None, schema_type: str,
             references: tuple[str, ...], registry_url: str, properties: tuple[str, ...]) -> None:
    """Register a schema under SUBJECT (from SCHEMA_FILE, --schema, or stdin with -); prints its id."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    if schema_file is not None and schema_text is not None:
        raise click.UsageError("give SCHEMA_FILE or --schema, not both")
    if schema_file is not None:
        text: str | None = sys.stdin.read() if str(schema_file) == "-" else schema_file.read_text()
    else:
        text = schema_text
    if text is None:
        raise click.UsageError("give SCHEMA_FILE or --schema")
    refs = []
    for ref in references:
        name, _, target = ref.partition("=")
        ref_subject, _, ref_version = target.rpartition(":")
        if not name or not ref_subject or not ref_version.isdigit():
            raise click.BadParameter(f"expected NAME=SUBJECT:VERSION, got {ref!r}", param_hint="--reference")
        refs.append(SchemaReference(name, ref_subject, int(ref_version)))
    schema = Schema(text, schema_type.upper(), refs)
    with _registry(registry_url, properties) as client:
        schema_id = _call(registry_url, f"register a schema under {subject}",
                          lambda: client.register_schema(subject, schema))
        version = _call(registry_url, f"look the schema up in {subject}",
                        lambda: client.lookup_schema(subject, schema).version)
    click.echo(f"registered {subject} version {version}: id {schema_id}")


@schemas.command()
@click.argument("subject")
@click.option("--version", "version", default=None, help="Delete this version only (a number, or latest).")
@click.option("--permanent", is_flag=True, help="Delete for good (what is soft-deleted already).")
@_registry_options
def delete(subject: str, version: str | None, permanent: bool, registry_url: str, properties: tuple[str, ...]) -> None:
    """Delete a subject (every version), or one version of it: soft, or with --permanent for good."""
    how = "permanently deleted" if permanent else "soft-deleted"
    with _registry(registry_url, properties) as client:
        if version is None:
            versions = _call(registry_url, f"delete {subject}", lambda: client.delete_subject(subject, permanent))
            click.echo(f"{how} {subject} versions {', '.join(map(str, versions))}")
        else:
            if version == "latest":
                number = _call(registry_url, f"read {subject}", lambda: client.get_latest_version(subject).version)
            else:
                number = _version(version)
            done = _call(registry_url, f"delete {subject} version {version}",
                         lambda: client.delete_version(subject, number, permanent))
            click.echo(f"{how} {subject} version {done}")


@schemas.command()
@click.argument("subject", required=False)
@click.option("--set", "level", type=click.Choice(LEVELS, case_sensitive=False), default=None,
              help="Set the compatibility level (of SUBJECT, or the global one).")
@click.option("--delete", "drop", is_flag=True, help="Drop SUBJECT's own level (the global one applies).")
@_registry_options
def config(subject: str | None, level: str | None, drop: bool, registry_url: str, properties: tuple[str, ...]) -> None:
    """Show or set the compatibility level of SUBJECT, or the global one without SUBJECT."""
    where = subject or "the registry (global)"
    with _registry(registry_url, properties) as client:
        if drop:
            if subject is None or level is not None:
                raise click.UsageError("--delete takes a SUBJECT and no --set")
            _call(registry_url, f"drop the level of {subject}", lambda: client.delete_config(subject))
            click.echo(f"{subject}: own level dropped; the global level applies ({_level(client, None)})")
        elif level is not None:
            answer = _call(registry_url, f"set the level of {where}",
                           lambda: client.set_compatibility(subject, level.upper()))
            click.echo(f"{where}: {answer.get('compatibility', level.upper())}")
        else:
            click.echo(f"{where}: {_call(registry_url, f'read the level of {where}', lambda: _level(client, subject))}")
