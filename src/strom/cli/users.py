"""``strom users add|list|delete``: SCRAM users through confluent-kafka's AdminClient
(AlterUserScramCredentials / DescribeUserScramCredentials), as Kafka's
``kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[password=...]'`` does.

The password is salted on this side (librdkafka does it); the broker stores salted keys only.
``--zookeeper HOST:PORT[/chroot]`` writes ZooKeeper directly instead, as ``kafka-configs --zookeeper``
did: the way to create the brokers' own SCRAM user before a cluster that logs in with it starts.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
from rich.table import Table

from strom.cli.common import (
    ClientOptions,
    Failure,
    StromGroup,
    admin_client,
    client_options,
    connection_options,
    kafka_error_message,
    out_console,
)

REQUEST_TIMEOUT = 30.0
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_zookeeper_option = click.option(
    "--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]",
    help="Write the cluster's ZooKeeper directly (no broker needed), like kafka-configs --zookeeper.")
_mechanism_option = click.option(
    "-m", "--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISMS, case_sensitive=False),
    help="SCRAM mechanism (repeatable); default: both.")


@click.group(cls=StromGroup, no_args_is_help=True)
@connection_options
def users() -> None:
    """Add, list and delete SCRAM users (SASL credentials stored by the brokers)."""


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.upper().replace("-", "_")]


def _wait(futures: dict[str, Any], action: str) -> None:
    from confluent_kafka import KafkaException

    for name, future in futures.items():
        try:
            future.result(timeout=REQUEST_TIMEOUT + 5)
        except KafkaException as e:
            raise Failure(f"cannot {action} user '{name}': {kafka_error_message(e.args[0])}") from None


@users.command()
@click.argument("name")
@click.option("--password", default=None, help="The password (default: asked for, or read from stdin).")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.option("--iterations", type=click.IntRange(4096, 16384), default=4096, show_default=True)
@_mechanism_option
@_zookeeper_option
@client_options
def add(name: str, password: str | None, password_stdin: bool, iterations: int, mechanisms: tuple[str, ...],
        zookeeper: str | None, client: ClientOptions) -> None:
    """Create user NAME, or set a new password for it."""
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    elif password is None:
        password = click.prompt(f"Password for {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password must not be empty")
    chosen = mechanisms or MECHANISMS
    if zookeeper is not None:
        from strom.security.scram import ScramCredential

        with _zk_store(zookeeper) as store:
            store.alter([(name, m.upper(), ScramCredential.from_password(m.upper(), password, iterations))
                         for m in chosen], [])
        click.echo(f"User '{name}' set for {', '.join(m.upper() for m in chosen)} in ZooKeeper at {zookeeper}.")
        return
    upserts = [UserScramCredentialUpsertion(name, ScramCredentialInfo(_mechanism(m), iterations), password.encode())
               for m in chosen]
    admin = admin_client(client)
    _wait(admin.alter_user_scram_credentials(upserts, request_timeout=REQUEST_TIMEOUT), "add")
    click.echo(f"User '{name}' set for {', '.join(m.upper() for m in chosen)}.")


@contextlib.contextmanager
def _zk_store(connect: str) -> Iterator[Any]:
    from kazoo.client import KazooClient

    from strom.cluster import zk_layout as zl
    from strom.cluster.zk_credentials import ZkCredentialStore

    zk = KazooClient(hosts=connect, timeout=10)
    try:
        zk.start(timeout=10)
    except Exception as e:
        raise Failure(f"cannot reach ZooKeeper at {connect}: {e}") from None
    try:
        zk.ensure_path(zl.CONFIG_USERS)
        zk.ensure_path(zl.CONFIG_CHANGES)
        store = ZkCredentialStore(zk)
        store.load()
        yield store
    finally:
        zk.stop()
        zk.close()


def _describe(admin: Any, names: list[str]) -> dict[str, Any]:
    from confluent_kafka import KafkaException

    try:
        if not names:
            return dict(admin.describe_user_scram_credentials(request_timeout=REQUEST_TIMEOUT)
                        .result(timeout=REQUEST_TIMEOUT + 5))
        return {n: f.result(timeout=REQUEST_TIMEOUT + 5) for n, f in
                admin.describe_user_scram_credentials(names, request_timeout=REQUEST_TIMEOUT).items()}
    except KafkaException as e:
        raise Failure(f"cannot list users: {kafka_error_message(e.args[0])}") from None


@users.command(name="list")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def list_users(names: tuple[str, ...], as_json: bool, client: ClientOptions) -> None:
    """List the SCRAM users (or just NAMES) with their mechanisms and iterations."""
    found = _describe(admin_client(client), list(names))
    rows = {name: [{"mechanism": info.mechanism.name.replace("_", "-"), "iterations": info.iterations}
                   for info in d.scram_credential_infos] for name, d in sorted(found.items())}
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("No SCRAM users.")
        return
    table = Table("User", "Mechanism", "Iterations", title="SCRAM users", title_justify="left")
    for name, infos in rows.items():
        for info in infos:
            table.add_row(name, info["mechanism"], str(info["iterations"]))
    out_console().print(table)


@users.command()
@click.argument("name")
@_mechanism_option
@client_options
def delete(name: str, mechanisms: tuple[str, ...], client: ClientOptions) -> None:
    """Delete user NAME's credentials (every mechanism, or those given)."""
    from confluent_kafka.admin import UserScramCredentialDeletion

    admin = admin_client(client)
    chosen = [m.upper() for m in mechanisms] or [
        info.mechanism.name.replace("_", "-") for info in _describe(admin, [name])[name].scram_credential_infos]
    deletions = [UserScramCredentialDeletion(name, _mechanism(m)) for m in chosen]
    _wait(admin.alter_user_scram_credentials(deletions, request_timeout=REQUEST_TIMEOUT), "delete")
    click.echo(f"User '{name}' deleted ({', '.join(chosen)}).")
