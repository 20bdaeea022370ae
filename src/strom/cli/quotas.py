"""``strom quotas describe|alter``: client quotas (DescribeClientQuotas, AlterClientQuotas), with
the entity options of Kafka's ``kafka-configs --entity-type users|clients``:

    strom quotas alter --user alice --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    strom quotas alter --client-id etl --add-config request_percentage=50
    strom quotas alter --user-defaults --delete-config producer_byte_rate
    strom quotas describe [--user alice] [--json]

No client library has these APIs, so the requests go over a plain connection (PLAINTEXT listeners).
"""

from __future__ import annotations

import json
from typing import Any

import click

from strom.cli.common import (
    ClientOptions,
    Failure,
    StromGroup,
    bootstrap_addresses,
    client_options,
    connection_options,
    out_console,
    raw_security,
)
from strom.client.raw_connection import RawConnection

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DEFAULT = "<default>"


@click.group(cls=StromGroup, no_args_is_help=True)
@connection_options
def quotas() -> None:
    """Describe and change client quotas (byte rates, request percentage) of users and client ids."""


def _entity_options(f: Any) -> Any:
    for option in reversed([
        click.option("--user", default=None, metavar="NAME", help="A user (the principal's name)."),
        click.option("--user-defaults", is_flag=True, help="The default of every user."),
        click.option("--client-id", default=None, metavar="ID", help="A client id."),
        click.option("--client-defaults", is_flag=True, help="The default of every client id."),
    ]):
        f = option(f)
    return f


def _entity(user: str | None, user_defaults: bool, client_id: str | None,
            client_defaults: bool) -> list[tuple[str, str | None]]:
    if user is not None and user_defaults or client_id is not None and client_defaults:
        raise click.UsageError("give a name or the defaults of a kind, not both")
    out: list[tuple[str, str | None]] = []
    if user is not None or user_defaults:
        out.append(("user", user))
    if client_id is not None or client_defaults:
        out.append(("client-id", client_id))
    return out


def _connect(opts: ClientOptions) -> RawConnection:
    security = raw_security(opts)  # no client library has the quota APIs: TLS and SASL are ours
    reasons = []
    for host, port in bootstrap_addresses(opts.bootstrap):
        try:
            return RawConnection(host, port, opts.connect_timeout, security)
        except OSError as e:
            reasons.append(str(e))
    raise Failure(f"cannot reach broker at {opts.bootstrap} ({'; '.join(reasons)})")


def _error(code: int, message: str | None) -> str:
    from strom.protocol.errors import ErrorCode

    name = ErrorCode(code).name.upper()
    return f"{message} ({name})" if message else name


@quotas.command()
@_entity_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def describe(user: str | None, user_defaults: bool, client_id: str | None, client_defaults: bool, as_json: bool,
             client: ClientOptions) -> None:
    """The quotas set, of every entity or of the one named."""
    from kio.schema.describe_client_quotas.v1 import request as req
    from kio.static.primitive import i8

    components = tuple(req.ComponentData(entity_type=kind, match_type=i8(0 if name is not None else 1), match=name)
                       for kind, name in _entity(user, user_defaults, client_id, client_defaults))
    with _connect(client) as conn:
        resp = conn.request(DESCRIBE_CLIENT_QUOTAS, 1,
                            req.DescribeClientQuotasRequest(components=components, strict=bool(components)))
    if int(resp.error_code):
        raise Failure(f"cannot describe quotas: {_error(int(resp.error_code), resp.error_message)}")
    rows = [({e.entity_type: e.entity_name or DEFAULT for e in entry.entity},
             {v.key: float(v.value) for v in entry.values}) for entry in resp.entries or ()]
    if as_json:
        click.echo(json.dumps([{"entity": e, "quotas": q} for e, q in rows], indent=2))
        return
    if not rows:
        click.echo("No quotas set.")
        return
    from rich.table import Table

    table = Table("User", "Client id", "Quotas")
    for e, q in rows:
        table.add_row(e.get("user", ""), e.get("client-id", ""),
                      ", ".join(f"{k}={v:g}" for k, v in sorted(q.items())))
    out_console().print(table)


@quotas.command()
@_entity_options
@click.option("--add-config", "adds", multiple=True, metavar="KEY=VALUE[,KEY=VALUE]",
              help="Set quotas: producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage.")
@click.option("--delete-config", "deletes", multiple=True, metavar="KEY[,KEY]", help="Remove quotas.")
@client_options
def alter(user: str | None, user_defaults: bool, client_id: str | None, client_defaults: bool,
          adds: tuple[str, ...], deletes: tuple[str, ...], client: ClientOptions) -> None:
    """Set or remove quotas of a user, a client id, or a user's client id."""
    from kio.schema.alter_client_quotas.v1 import request as req
    from kio.static.primitive import f64

    entity = _entity(user, user_defaults, client_id, client_defaults)
    if not entity:
        raise click.UsageError("name the entity: --user/--user-defaults and/or --client-id/--client-defaults")
    ops = []
    for item in (p for a in adds for p in a.split(",") if p.strip()):
        key, sep, value = item.partition("=")
        try:
            ops.append(req.OpData(key=key.strip(), value=f64(float(value)), remove=False))
        except ValueError:
            raise click.UsageError(f"--add-config wants KEY=NUMBER, not '{item}'") from None
        if not sep:
            raise click.UsageError(f"--add-config wants KEY=NUMBER, not '{item}'")
    ops += [req.OpData(key=k.strip(), value=f64(0.0), remove=True) for d in deletes for k in d.split(",") if k.strip()]
    if not ops:
        raise click.UsageError("nothing to change: give --add-config or --delete-config")
    body = req.AlterClientQuotasRequest(entries=(req.EntryData(
        entity=tuple(req.EntityData(entity_type=k, entity_name=n) for k, n in entity), ops=tuple(ops)),),
        validate_only=False)
    with _connect(client) as conn:
        resp = conn.request(ALTER_CLIENT_QUOTAS, 1, body)
    (entry,) = resp.entries
    if int(entry.error_code):
        raise Failure(f"cannot change quotas: {_error(int(entry.error_code), entry.error_message)}")
    what = " ".join(f"{k} {n if n is not None else DEFAULT}" for k, n in entity)
    click.echo(f"Updated quotas of {what}.")
