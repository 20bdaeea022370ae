"""``strom produce TOPIC``: one record per line of stdin, through confluent-kafka's Producer."""

from __future__ import annotations

import sys
from typing import Any

import click

from strom.cli.common import (
    ClientOptions,
    Failure,
    StromCommand,
    base_config,
    check_reachable,
    client_options,
    kafka_error_message,
    note,
    parse_key_values,
    topic_metadata,
)


def _strip_newline(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


@click.command(cls=StromCommand)
@click.argument("topic")
@click.option("-K", "--key-separator", default=None, metavar="SEP",
              help="Split each line at the first SEP into key and value (a line without SEP fails).")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="Header added to every record (repeatable).")
@click.option("-p", "--partition", type=click.IntRange(min=0), default=None,
              help="Write to this partition (default: the partitioner decides, by key).")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True,
              help="Acknowledgements the leader must collect before answering.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none",
              show_default=True, help="Compression codec for record batches.")
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True,
              help="How long to wait to fill a batch.")
@click.option("--delivery-timeout", type=click.FloatRange(min=1), default=30.0, show_default=True,
              metavar="SECONDS", help="Give up on a record not acknowledged within this time.")
@click.option("-q", "--quiet", is_flag=True, help="No summary line on stderr.")
@client_options
def produce(topic: str, key_separator: str | None, headers: tuple[str, ...], partition: int | None, acks: str,
            compression: str, linger_ms: int, delivery_timeout: float, quiet: bool,
            client: ClientOptions) -> None:
    """Write lines from stdin to TOPIC, one record per line.

    Each record that fails is reported on stderr with its line number, and the exit code is 1 if
    any failed.
    """
    from confluent_kafka import KafkaException, Producer

    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    header_list = [(k, v.encode()) for k, v in parse_key_values(headers, "--header")]
    separator = key_separator.encode() if key_separator is not None else None

    check_reachable(client)
    config = base_config(client, **{
        "acks": acks,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "message.timeout.ms": int(delivery_timeout * 1000),
        # The broker may create a missing topic on first use, as it would for any producer.
        "allow.auto.create.topics": True,
    })
    try:
        producer = Producer(config)
    except KafkaException as e:
        raise Failure(f"cannot create producer: {kafka_error_message(e.args[0])}") from None
    tmd = topic_metadata(producer, client, topic)
    if partition is not None and partition not in tmd.partitions:
        raise Failure(f"topic '{topic}' has {len(tmd.partitions)} partitions; there is no partition {partition}")

    failures: list[str] = []
    delivered = 0

    def report(line_no: int, reason: str) -> None:
        failures.append(reason)
        click.echo(f"record at line {line_no} failed: {reason}", err=True)

    def on_delivery(line_no: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            nonlocal delivered
            if err is not None:
                report(line_no, kafka_error_message(err))
            else:
                delivered += 1
        return callback

    if sys.stdin.isatty() and not quiet:
        note(f"Type records for '{topic}', one per line; Ctrl-D to finish.")
    line_no = 0
    try:
        for raw in sys.stdin.buffer:
            line_no += 1
            line = _strip_newline(raw)
            key: bytes | None = None
            value = line
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    report(line_no, f"no key separator {key_separator!r} in the line")
                    continue
            kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery(line_no)}
            if header_list:
                kwargs["headers"] = header_list
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)  # local queue full: let deliveries drain
                except KafkaException as e:
                    report(line_no, kafka_error_message(e.args[0]))
                    break
            producer.poll(0)
    except KeyboardInterrupt:
        note("Interrupted: sending what was read so far.")
    remaining = producer.flush(delivery_timeout + 5)
    if remaining:
        click.echo(f"{remaining} record(s) not acknowledged within {delivery_timeout:g}s", err=True)
    failed = len(failures) + remaining
    if not quiet:
        note(f"Produced {delivered} record(s) to '{topic}'" + (f", {failed} failed." if failed else "."))
    if failed:
        raise click.exceptions.Exit(1)
