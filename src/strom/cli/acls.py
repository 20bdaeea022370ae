"""``strom acls add|list|remove``: ACLs through confluent-kafka's AdminClient (CreateAcls,
DescribeAcls, DeleteAcls), with the options of Kafka's ``kafka-acls``:

    strom acls add --allow-principal User:alice --operation Read --topic orders --group billing
    strom acls add --deny-principal User:bob --operation Write --topic orders-
                   --resource-pattern-type prefixed
    strom acls list [--topic orders] [--principal User:alice]
    strom acls remove --allow-principal User:alice --operation Read --topic orders
"""

from __future__ import annotations

import json
from typing import Any

import click

from strom.cli.common import (
    ClientOptions,
    Failure,
    StromGroup,
    admin_client,
    client_options,
    connection_options,
    is_unsupported,
    kafka_error_message,
    out_console,
)

REQUEST_TIMEOUT = 30.0
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite")
# "Read", "read", "READ"; "ClusterAction", "cluster-action", "CLUSTER_ACTION" -> confluent-kafka's enum name
_OPERATION_KEYS = {name.lower(): "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()
                   for name in OPERATIONS}


@click.group(cls=StromGroup, no_args_is_help=True)
@connection_options
def acls() -> None:
    """Add, list and remove ACLs (needs authorizer.class.name on the broker)."""


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[str, str]]:
    """(confluent-kafka's ResourceType name, resource name) of each resource named by the options."""
    out = [("TOPIC", t) for t in topics] + [("GROUP", g) for g in groups]
    out += [("TRANSACTIONAL_ID", t) for t in transactional_ids]
    if cluster:
        out.append(("BROKER", "kafka-cluster"))  # librdkafka's name for the cluster resource
    return out


def _operation_key(name: str) -> str:
    key = _OPERATION_KEYS.get(name.lower().replace("_", "").replace("-", ""))
    if key is None:
        raise click.UsageError(f"unknown operation '{name}'; one of {', '.join(OPERATIONS)}")
    return key


def _resource_options(f: Any) -> Any:
    for option in reversed([
        click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable; '*' = all)."),
        click.option("--group", "groups", multiple=True, metavar="NAME", help="A consumer group (repeatable)."),
        click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
                     help="A transactional id (repeatable)."),
        click.option("--cluster", is_flag=True, help="The cluster itself."),
        click.option("--resource-pattern-type", "pattern", default="literal", show_default=True,
                     type=click.Choice(["literal", "prefixed"], case_sensitive=False),
                     help="Whether each name is the resource's name or a prefix of names."),
    ]):
        f = option(f)
    return f


def _bindings(principals: list[tuple[str, str]], hosts: tuple[str, ...], operations: tuple[str, ...],
              resources: list[tuple[str, str]], pattern: str, as_filter: bool = False) -> list[Any]:
    from confluent_kafka import admin as ck

    cls = ck.AclBindingFilter if as_filter else ck.AclBinding
    out = []
    for permission, principal in principals:
        for host in hosts or ("*",):
            for op in operations:
                for rtype, name in resources:
                    out.append(cls(ck.ResourceType[rtype], name, ck.ResourcePatternType[pattern.upper()], principal,
                                   host, ck.AclOperation[_operation_key(op)], ck.AclPermissionType[permission]))
    return out


def _principals(allow: tuple[str, ...], deny: tuple[str, ...]) -> list[tuple[str, str]]:
    out = [("ALLOW", p) for p in allow] + [("DENY", p) for p in deny]
    for _, p in out:
        kind, sep, name = p.partition(":")
        if not (kind and sep and name):
            raise click.UsageError(f"principal '{p}' is not of the form User:NAME")
    if not out:
        raise click.UsageError("give --allow-principal or --deny-principal")
    return out


def _failure(action: str, opts: ClientOptions, e: Exception) -> Failure:
    err = e.args[0] if e.args else e
    if is_unsupported(err):
        return Failure(f"the broker at {opts.bootstrap} does not support {action}: {kafka_error_message(err)}")
    text = kafka_error_message(err)
    if "SECURITY_DISABLED" in text or "Security features are disabled" in text:
        return Failure(f"cannot {action}: the broker has no authorizer (set authorizer.class.name)")
    return Failure(f"cannot {action}: {text}")


@acls.command()
@click.option("--allow-principal", "allow", multiple=True, metavar="User:NAME", help="Allow this principal.")
@click.option("--deny-principal", "deny", multiple=True, metavar="User:NAME", help="Deny this principal.")
@click.option("--allow-host", "--host", "hosts", multiple=True, metavar="HOST",
              help="Only from this address (default: any host).")
@click.option("--operation", "operations", multiple=True, required=True, metavar="OP",
              help=f"Repeatable: {', '.join(OPERATIONS)}.")
@_resource_options
@client_options
def add(allow: tuple[str, ...], deny: tuple[str, ...], hosts: tuple[str, ...], operations: tuple[str, ...],
        topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...], cluster: bool,
        pattern: str, client: ClientOptions) -> None:
    """Add ACLs: each principal x host x operation x resource."""
    from confluent_kafka import KafkaException

    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    bindings = _bindings(_principals(allow, deny), hosts, operations, resources, pattern)
    admin = admin_client(client)
    try:
        for future in admin.create_acls(bindings, request_timeout=REQUEST_TIMEOUT).values():
            future.result(timeout=REQUEST_TIMEOUT + 5)
    except KafkaException as e:
        raise _failure("add ACLs", client, e) from None
    click.echo(f"Added {len(bindings)} ACL(s).")


@acls.command("list")
@click.option("--principal", default=None, metavar="User:NAME", help="Only this principal's ACLs.")
@_resource_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def list_(principal: str | None, topics: tuple[str, ...], groups: tuple[str, ...],
          transactional_ids: tuple[str, ...], cluster: bool, pattern: str, as_json: bool,
          client: ClientOptions) -> None:
    """List ACLs (all of them, or those of the named resources, as they are stored)."""
    from confluent_kafka import KafkaException
    from confluent_kafka import admin as ck

    resources = _resources(topics, groups, transactional_ids, cluster)
    pattern_type = ck.ResourcePatternType[pattern.upper()] if resources else ck.ResourcePatternType.ANY
    make_filter: Any = ck.AclBindingFilter  # None matches anything (the type hints say str)
    filters = [make_filter(ck.ResourceType[rtype], name, pattern_type, principal, None,
                                   ck.AclOperation.ANY, ck.AclPermissionType.ANY) for rtype, name in resources] or [
        make_filter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, principal, None,
                            ck.AclOperation.ANY, ck.AclPermissionType.ANY)]
    admin = admin_client(client)
    found: list[Any] = []
    try:
        for f in filters:
            found += admin.describe_acls(f, request_timeout=REQUEST_TIMEOUT).result(timeout=REQUEST_TIMEOUT + 5)
    except KafkaException as e:
        raise _failure("list ACLs", client, e) from None
    rows = sorted({_row(b) for b in found})
    if as_json:
        keys = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission")
        click.echo(json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2))
        return
    if not rows:
        # librdkafka turns DescribeAcls' SECURITY_DISABLED into an empty list: tell the two apart.
        click.echo("No ACLs." if _authorizer_on(admin) else
                   "No ACLs: the broker has no authorizer (set authorizer.class.name).")
        return
    from rich.table import Table

    table = Table("Resource", "Name", "Pattern", "Principal", "Host", "Operation", "Permission")
    for r in rows:
        table.add_row(*r)
    out_console().print(table)


def _authorizer_on(admin: Any) -> bool:
    """Whether the broker answering says it has an authorizer (its authorizer.class.name)."""
    from confluent_kafka.admin import ConfigResource

    try:
        md = admin.list_topics(timeout=REQUEST_TIMEOUT)
        resource = ConfigResource("broker", str(next(iter(md.brokers))))
        (future,) = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT).values()
        entry = future.result(timeout=REQUEST_TIMEOUT + 5).get("authorizer.class.name")
    except Exception:
        return True  # unknown: say nothing more
    return entry is None or bool(entry.value)


def _row(b: Any) -> tuple[str, str, str, str, str, str, str]:
    rtype = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
    return (rtype, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


@acls.command()
@click.option("--allow-principal", "allow", multiple=True, metavar="User:NAME")
@click.option("--deny-principal", "deny", multiple=True, metavar="User:NAME")
@click.option("--allow-host", "--host", "hosts", multiple=True, metavar="HOST")
@click.option("--operation", "operations", multiple=True, required=True, metavar="OP")
@_resource_options
@client_options
def remove(allow: tuple[str, ...], deny: tuple[str, ...], hosts: tuple[str, ...], operations: tuple[str, ...],
           topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...], cluster: bool,
           pattern: str, client: ClientOptions) -> None:
    """Remove the ACLs these options name (the same options as add)."""
    from confluent_kafka import KafkaException

    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    filters = _bindings(_principals(allow, deny), hosts, operations, resources, pattern, as_filter=True)
    admin = admin_client(client)
    removed = 0
    try:
        for future in admin.delete_acls(filters, request_timeout=REQUEST_TIMEOUT).values():
            removed += len(future.result(timeout=REQUEST_TIMEOUT + 5))
    except KafkaException as e:
        raise _failure("remove ACLs", client, e) from None
    click.echo(f"Removed {removed} ACL(s).")
