"""``strom topics create|list|describe|delete|alter``: topic administration through confluent-kafka's
AdminClient, against any Kafka-compatible broker."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
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
    fetch_metadata,
    is_unsupported,
    kafka_error_message,
    note,
    out_console,
    parse_key_values,
    raw_security,
    topic_metadata,
)
from strom.client.raw_connection import RawConnection

REQUEST_TIMEOUT = 30.0
API_VERSIONS = 18
DESCRIBE_LOG_DIRS = 35


@click.group(cls=StromGroup, no_args_is_help=True)
@connection_options
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


def _result(future: Any) -> Any:
    return future.result(timeout=REQUEST_TIMEOUT + 5)


def _unsupported_line(what: str, opts: ClientOptions, err: Any) -> str:
    return f"the broker at {opts.bootstrap} does not support {what}: {kafka_error_message(err)}"


# --------------------------------------------------------------------------------------------------
# create


@topics.command()
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=None,
              help="Number of partitions (default: the broker's num.partitions).")
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), default=None,
              help="Replicas per partition (default: the broker's default.replication.factor).")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic config override, e.g. --config retention.ms=86400000 (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly if the topic already exists.")
@client_options
def create(name: str, partitions: int | None, replication_factor: int | None, configs: tuple[str, ...],
           if_not_exists: bool, client: ClientOptions) -> None:
    """Create topic NAME."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    config = dict(parse_key_values(configs, "--config"))
    admin = admin_client(client)
    fetch_metadata(admin, client)  # bounded connection check
    new = NewTopic(name, num_partitions=partitions if partitions is not None else -1,
                   replication_factor=replication_factor if replication_factor is not None else -1,
                   config=config)
    futures = admin.create_topics([new], request_timeout=REQUEST_TIMEOUT, operation_timeout=REQUEST_TIMEOUT)
    try:
        _result(futures[name])
    except KafkaException as e:
        err = e.args[0]
        if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            if if_not_exists:
                note(f"Topic '{name}' already exists.")
                return
            raise Failure(f"topic '{name}' already exists") from None
        if is_unsupported(err):
            raise Failure(_unsupported_line("creating topics with these settings", client, err)) from None
        raise Failure(f"cannot create topic '{name}': {kafka_error_message(err)}") from None
    click.echo(f"Created topic '{name}'.")


# --------------------------------------------------------------------------------------------------
# list


def _replication_factor(tmd: Any) -> int:
    return max((len(p.replicas) for p in tmd.partitions.values()), default=0)


@topics.command("list")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (names starting with __).")
@click.option("-q", "--quiet", is_flag=True, help="Print topic names only, one per line.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def list_(exclude_internal: bool, quiet: bool, as_json: bool, client: ClientOptions) -> None:
    """List topics with their partition counts."""
    admin = admin_client(client)
    md = fetch_metadata(admin, client)
    names = sorted(n for n in md.topics if not (exclude_internal and n.startswith("__")))
    if quiet:
        for n in names:
            click.echo(n)
        return
    rows = [{"name": n, "partitions": len(md.topics[n].partitions),
             "replication_factor": _replication_factor(md.topics[n])} for n in names]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} topic(s) at {client.bootstrap}", title_justify="left")
    table.add_column("Topic", overflow="fold")
    table.add_column("Partitions", justify="right")
    table.add_column("Replication factor", justify="right")
    for r in rows:
        table.add_row(r["name"], str(r["partitions"]), str(r["replication_factor"]))
    out_console().print(table)


# --------------------------------------------------------------------------------------------------
# describe


def _watermarks(admin: Any, topic: str, partitions: Iterable[int]) -> dict[int, tuple[int | None, int | None]]:
    """(log start offset, end offset) per partition through ListOffsets; None where the broker did not say."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    parts = list(partitions)
    found: dict[int, list[int | None]] = {p: [None, None] for p in parts}
    for slot, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
        try:
            futures = admin.list_offsets({TopicPartition(topic, p): spec for p in parts},
                                         request_timeout=REQUEST_TIMEOUT)
        except Exception:
            continue
        for tp, fut in futures.items():
            with contextlib.suppress(Exception):
                found[tp.partition][slot] = int(_result(fut).offset)
    return {p: (v[0], v[1]) for p, v in found.items()}


def _describe_log_dirs_version(conn: RawConnection) -> int | None:
    from kio.index import load_request_schema
    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    response = conn.request(API_VERSIONS, 0, ApiVersionsRequest())
    for key in response.api_keys:
        if int(key.api_key) == DESCRIBE_LOG_DIRS:
            for version in range(int(key.max_version), max(int(key.min_version), 1) - 1, -1):
                try:
                    load_request_schema(DESCRIBE_LOG_DIRS, version)
                except Exception:
                    continue
                return version
    return None


def _broker_log_dir_sizes(host: str, port: int, topic: str, partitions: list[int],
                          timeout: float, security: Any = None) -> dict[int, int] | None:
    """Partition sizes in bytes as one broker reports them, or None if it cannot say."""
    from kio.index import load_request_schema

    try:
        conn = RawConnection(host, port, timeout, security)
    except OSError:  # (an ssl.SSLError too)
        return None
    try:
        version = _describe_log_dirs_version(conn)
        if version is None:
            return None
        request_cls: Any = load_request_schema(DESCRIBE_LOG_DIRS, version)
        module = __import__(request_cls.__module__, fromlist=["DescribableLogDirTopic"])
        topic_cls = module.DescribableLogDirTopic
        body = request_cls(topics=(topic_cls(topic=topic, partitions=tuple(partitions)),))
        response = conn.request(DESCRIBE_LOG_DIRS, version, body)
        if int(getattr(response, "error_code", 0)):
            return None
        sizes: dict[int, int] = {}
        for result in response.results:
            if int(result.error_code):
                continue
            for t in result.topics:
                if t.name != topic:
                    continue
                for p in t.partitions:
                    if not p.is_future_key:
                        sizes[int(p.partition_index)] = sizes.get(int(p.partition_index), 0) + int(p.partition_size)
        return sizes
    except Exception:
        return None
    finally:
        conn.close()


def _sizes(md: Any, tmd: Any, opts: ClientOptions) -> dict[int, int] | None:
    """Size of each partition on its leader, through DescribeLogDirs; None when no broker gives sizes."""
    security = raw_security(opts)
    by_leader: dict[int, list[int]] = {}
    for p in tmd.partitions.values():
        if p.leader >= 0:
            by_leader.setdefault(p.leader, []).append(p.id)
    sizes: dict[int, int] = {}
    answered = False
    for leader, parts in by_leader.items():
        broker = md.brokers.get(leader)
        if broker is None:
            continue
        got = _broker_log_dir_sizes(broker.host, broker.port, tmd.topic, sorted(parts), opts.connect_timeout,
                                    security)
        if got is None:
            continue
        answered = True
        sizes.update({p: s for p, s in got.items() if p in parts})
    return sizes if answered else None


def _config_source(source: Any) -> str:
    """A config entry's source by Kafka's name; confluent-kafka gives it as a plain int."""
    from confluent_kafka.admin import ConfigSource

    try:
        return str(ConfigSource(source).name)
    except ValueError:
        return str(getattr(source, "name", source))


def _topic_configs(admin: Any, topic: str, all_configs: bool) -> tuple[dict[str, dict[str, Any]], str | None]:
    from confluent_kafka.admin import ConfigResource, ConfigSource

    try:
        futures = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=REQUEST_TIMEOUT)
        entries = _result(next(iter(futures.values())))
    except Exception as e:
        err = e.args[0] if e.args else e
        return {}, kafka_error_message(err)
    out: dict[str, dict[str, Any]] = {}
    for name, entry in sorted(entries.items()):
        source = _config_source(entry.source)
        if all_configs or source == ConfigSource.DYNAMIC_TOPIC_CONFIG.name:
            out[name] = {"value": None if entry.is_sensitive else entry.value, "source": source}
    return out, None


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _describe_one(admin: Any, md: Any, tmd: Any, opts: ClientOptions, all_configs: bool) -> dict[str, Any]:
    parts = sorted(tmd.partitions)
    marks = _watermarks(admin, tmd.topic, parts)
    sizes = _sizes(md, tmd, opts)
    configs, config_error = _topic_configs(admin, tmd.topic, all_configs)
    partitions = []
    for pid in parts:
        p = tmd.partitions[pid]
        row: dict[str, Any] = {
            "partition": pid, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs),
            "start_offset": marks[pid][0], "end_offset": marks[pid][1],
        }
        if sizes is not None:
            row["size_bytes"] = sizes.get(pid)
        if p.error is not None:
            row["error"] = kafka_error_message(p.error)
        partitions.append(row)
    described: dict[str, Any] = {
        "name": tmd.topic, "partitions": partitions, "replication_factor": _replication_factor(tmd),
        "configs": {k: v["value"] for k, v in configs.items()},
    }
    if all_configs:
        described["config_sources"] = {k: v["source"] for k, v in configs.items()}
    if config_error is not None:
        described["configs_error"] = config_error
    return described


def _print_described(d: dict[str, Any], partition_count: int) -> None:
    console = out_console()
    console.print(f"[bold]Topic:[/bold] {d['name']}   [bold]Partitions:[/bold] {partition_count}   "
                  f"[bold]Replication factor:[/bold] {d['replication_factor']}", highlight=False)
    if d.get("configs_error"):
        console.print(f"Configs: unavailable ({d['configs_error']})", markup=False, highlight=False)
    elif "config_sources" in d:
        configs = Table("Config", "Value", "Source", title="Configs", title_justify="left")
        for k, v in d["configs"].items():
            configs.add_row(k, "(sensitive)" if v is None else v, d["config_sources"][k])
        console.print(configs)
    elif d["configs"]:
        shown = ", ".join(f"{k}={'(sensitive)' if v is None else v}" for k, v in d["configs"].items())
        console.print(f"Configs: {shown}", markup=False, highlight=False)
    else:
        console.print("Configs: (no overrides)", markup=False, highlight=False)
    with_size = any("size_bytes" in p for p in d["partitions"])
    with_error = any("error" in p for p in d["partitions"])
    table = Table()
    for col in ("Partition", "Leader", "Replicas", "ISR", "Start offset", "End offset"):
        table.add_column(col, justify="right" if col not in ("Replicas", "ISR") else "left")
    if with_size:
        table.add_column("Size", justify="right")
    if with_error:
        table.add_column("Error")

    def show(v: Any) -> str:
        return "?" if v is None else str(v)

    for p in d["partitions"]:
        cells = [str(p["partition"]), str(p["leader"]) if p["leader"] >= 0 else "none",
                 ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
                 show(p["start_offset"]), show(p["end_offset"])]
        if with_size:
            cells.append("?" if p.get("size_bytes") is None else _human_size(p["size_bytes"]))
        if with_error:
            cells.append(p.get("error", ""))
        table.add_row(*cells)
    console.print(table)


def _wanted_partition(p: dict[str, Any], under_replicated: bool, unavailable: bool) -> bool:
    """kafka-topics' filters: --under-replicated-partitions (fewer in-sync replicas than replicas),
    --unavailable-partitions (no leader); both given, either one."""
    if not under_replicated and not unavailable:
        return True
    return (under_replicated and len(p["isr"]) < len(p["replicas"])) or (unavailable and p["leader"] < 0)


@topics.command()
@click.argument("names", nargs=-1)
@click.option("--all-configs", is_flag=True, help="Show every config with its source, not just overrides.")
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True,
              help="Only partitions whose ISR is smaller than their replicas.")
@click.option("--unavailable-partitions", "unavailable", is_flag=True, help="Only partitions without a leader.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@client_options
def describe(names: tuple[str, ...], all_configs: bool, under_replicated: bool, unavailable: bool, as_json: bool,
             client: ClientOptions) -> None:
    """Describe topics NAMES (default: all): partitions, leaders, replicas, ISR, offsets, size, configs."""
    admin = admin_client(client)
    md = fetch_metadata(admin, client)
    wanted = list(names) or sorted(md.topics)
    described = []
    counts: list[int] = []  # each topic's partitions, for the header when a filter leaves out some
    for name in wanted:
        tmd = topic_metadata(admin, client, name) if names else md.topics[name]
        d = _describe_one(admin, md, tmd, client, all_configs)
        counts.append(len(d["partitions"]))
        d["partitions"] = [p for p in d["partitions"] if _wanted_partition(p, under_replicated, unavailable)]
        if d["partitions"] or not (under_replicated or unavailable):
            described.append(d)
        else:
            counts.pop()
    if as_json:
        click.echo(json.dumps(described, indent=2))
        return
    for i, (d, count) in enumerate(zip(described, counts, strict=True)):
        if i:
            click.echo()
        _print_described(d, count)


# --------------------------------------------------------------------------------------------------
# delete


@topics.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed quietly for topics that do not exist.")
@client_options
def delete(names: tuple[str, ...], if_exists: bool, client: ClientOptions) -> None:
    """Delete topics NAMES and all their records."""
    from confluent_kafka import KafkaError, KafkaException

    admin = admin_client(client)
    fetch_metadata(admin, client)
    futures = admin.delete_topics(list(dict.fromkeys(names)), request_timeout=REQUEST_TIMEOUT,
                                  operation_timeout=REQUEST_TIMEOUT)
    failures = []
    for name, fut in futures.items():
        try:
            _result(fut)
            click.echo(f"Deleted topic '{name}'.")
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                if if_exists:
                    note(f"Topic '{name}' does not exist.")
                    continue
                failures.append(f"topic '{name}' does not exist")
            elif is_unsupported(err):
                failures.append(_unsupported_line("deleting topics", client, err))
            else:
                failures.append(f"cannot delete topic '{name}': {kafka_error_message(err)}")
    if failures:
        raise Failure("; ".join(failures))


# --------------------------------------------------------------------------------------------------
# alter


@topics.command()
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=None,
              help="Grow the topic to this many partitions.")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Set a topic config (repeatable).")
@click.option("--delete-config", "deletes", multiple=True, metavar="KEY",
              help="Remove a topic config override, back to the broker default (repeatable).")
@client_options
def alter(name: str, partitions: int | None, configs: tuple[str, ...], deletes: tuple[str, ...],
          client: ClientOptions) -> None:
    """Add partitions to topic NAME or change its configs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    if partitions is None and not configs and not deletes:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    sets = parse_key_values(configs, "--config")
    admin = admin_client(client)
    tmd = topic_metadata(admin, client, name)
    if partitions is not None:
        current = len(tmd.partitions)
        if partitions < current:
            raise Failure(f"topic '{name}' has {current} partitions; partitions can only be added")
        if partitions > current:
            futures = admin.create_partitions([NewPartitions(name, partitions)], request_timeout=REQUEST_TIMEOUT,
                                              operation_timeout=REQUEST_TIMEOUT)
            try:
                _result(futures[name])
            except KafkaException as e:
                err = e.args[0]
                if is_unsupported(err):
                    raise Failure(_unsupported_line("adding partitions (CreatePartitions)", client, err)) from None
                raise Failure(f"cannot add partitions to '{name}': {kafka_error_message(err)}") from None
            click.echo(f"Topic '{name}' now has {partitions} partitions (was {current}).")
        else:
            note(f"Topic '{name}' already has {current} partitions.")
    if sets or deletes:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
        resource = ConfigResource("topic", name, incremental_configs=entries)
        futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT)
        try:
            _result(next(iter(futures.values())))
        except KafkaException as e:
            err = e.args[0]
            if is_unsupported(err):
                raise Failure(_unsupported_line("changing configs (IncrementalAlterConfigs)", client, err)) from None
            raise Failure(f"cannot change configs of '{name}': {kafka_error_message(err)}") from None
        changes = [f"{k}={v}" for k, v in sets] + [f"-{k}" for k in deletes]
        click.echo(f"Updated configs of topic '{name}': {', '.join(changes)}.")


# `strom topics reassign` lives in its own module.
from strom.cli.reassign import reassign  # noqa: E402

topics.add_command(reassign)
