"""``strom configs describe|alter``: topic and broker configs through confluent-kafka's AdminClient
(DescribeConfigs and IncrementalAlterConfigs), like Kafka's ``kafka-configs``."""

from __future__ import annotations

import json
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
    is_unsupported,
    kafka_error_message,
    out_console,
    parse_key_values,
)

REQUEST_TIMEOUT = 30.0
# Sources shown without --all: the ones that differ from the built-in default.
_SET_SOURCES = ("DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG",
                "STATIC_BROKER_CONFIG")


@click.group(cls=StromGroup, no_args_is_help=True)
@connection_options
def configs() -> None:
    """Describe and change topic and broker configs."""


def _resource(topic: str | None, broker: int | None, incremental: list[Any] | None = None) -> Any:
    from confluent_kafka.admin import ConfigResource

    if (topic is None) == (broker is None):
        raise click.UsageError("give exactly one of --topic NAME or --broker ID")
    if topic is not None:
        return ConfigResource("topic", topic, incremental_configs=incremental)
    return ConfigResource("broker", str(broker), incremental_configs=incremental)


def _what(topic: str | None, broker: int | None) -> str:
    return f"topic '{topic}'" if topic is not None else f"broker {broker}"


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    try:
        return str(ConfigSource(source).name)
    except ValueError:
        return str(getattr(source, "name", source))


def _failure(what: str, action: str, opts: ClientOptions, e: Exception) -> Failure:
    from confluent_kafka import KafkaError

    err = e.args[0] if e.args else e
    if is_unsupported(err):
        return Failure(f"the broker at {opts.bootstrap} does not support {action}: {kafka_error_message(err)}")
    if hasattr(err, "code") and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return Failure(f"{what} does not exist")
    return Failure(f"cannot {action} of {what}: {kafka_error_message(err)}")


@configs.command()
@click.option("-t", "--topic", default=None, metavar="NAME", help="The topic whose configs to show.")
@click.option("--broker", type=int, default=None, metavar="ID", help="The broker whose configs to show.")
@click.option("-a", "--all", "show_all", is_flag=True, help="Every config, defaults included (default: only those set).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def describe(topic: str | None, broker: int | None, show_all: bool, as_json: bool, client: ClientOptions) -> None:
    """Show the configs of a topic or a broker, with where each value comes from."""
    from confluent_kafka import KafkaException

    resource = _resource(topic, broker)
    what = _what(topic, broker)
    admin = admin_client(client)
    try:
        (future,) = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT).values()
        entries = future.result(timeout=REQUEST_TIMEOUT + 5)
    except KafkaException as e:
        raise _failure(what, "describe the configs", client, e) from None
    rows = []
    for name, entry in sorted(entries.items()):
        source = _source_name(entry.source)
        if show_all or source in _SET_SOURCES:
            rows.append({"name": name, "value": None if entry.is_sensitive else entry.value, "source": source,
                         "read_only": bool(entry.is_read_only), "sensitive": bool(entry.is_sensitive)})
    if as_json:
        click.echo(json.dumps({r["name"]: {k: v for k, v in r.items() if k != "name"} for r in rows}, indent=2))
        return
    if not rows:
        click.echo(f"No configs of {what} differ from the defaults (use --all to see every config).")
        return
    table = Table("Config", "Value", "Source", *([] if topic is not None else ["Read-only"]),
                  title=f"Configs of {what}", title_justify="left")
    for r in rows:
        value = "(sensitive)" if r["sensitive"] else ("(null)" if r["value"] is None else r["value"])
        table.add_row(r["name"], value, r["source"], *([] if topic is not None else ["yes" if r["read_only"] else "no"]))
    out_console().print(table)


@configs.command()
@click.option("-t", "--topic", default=None, metavar="NAME", help="The topic to change.")
@click.option("--broker", type=int, default=None, metavar="ID", help="The broker to change (dynamic broker configs).")
@click.option("-s", "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a config (repeatable).")
@click.option("-d", "--delete", "deletes", multiple=True, metavar="KEY",
              help="Remove a setting, back to the default (repeatable).")
@click.option("--append", "appends", multiple=True, metavar="KEY=ITEM[,ITEM]",
              help="Add items to a list config such as cleanup.policy (repeatable).")
@click.option("--subtract", "subtracts", multiple=True, metavar="KEY=ITEM[,ITEM]",
              help="Remove items from a list config (repeatable).")
@click.option("--validate-only", is_flag=True, help="Only check the change; change nothing.")
@client_options
def alter(topic: str | None, broker: int | None, sets: tuple[str, ...], deletes: tuple[str, ...],
          appends: tuple[str, ...], subtracts: tuple[str, ...], validate_only: bool, client: ClientOptions) -> None:
    """Change configs of a topic or a broker (IncrementalAlterConfigs: other settings stay as they are)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    ops: list[tuple[str, str, str | None]] = []
    ops += [("SET", k, v) for k, v in parse_key_values(sets, "--set")]
    ops += [("DELETE", k, None) for k in deletes]
    ops += [("APPEND", k, v) for k, v in parse_key_values(appends, "--append")]
    ops += [("SUBTRACT", k, v) for k, v in parse_key_values(subtracts, "--subtract")]
    if not ops:
        raise click.UsageError("nothing to change: give --set, --delete, --append or --subtract")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType[op]) for op, k, v in ops]
    resource = _resource(topic, broker, entries)
    what = _what(topic, broker)
    admin = admin_client(client)
    try:
        (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only,
                                                    request_timeout=REQUEST_TIMEOUT).values()
        future.result(timeout=REQUEST_TIMEOUT + 5)
    except KafkaException as e:
        raise _failure(what, "change the configs", client, e) from None
    shown = {"SET": "{k}={v}", "DELETE": "-{k}", "APPEND": "{k}+={v}", "SUBTRACT": "{k}-={v}"}
    changes = ", ".join(shown[op].format(k=k, v=v) for op, k, v in ops)
    if validate_only:
        click.echo(f"Valid (nothing changed) for {what}: {changes}.")
    else:
        click.echo(f"Updated configs of {what}: {changes}.")
