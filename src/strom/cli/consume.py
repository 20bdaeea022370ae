"""``strom consume TOPIC``: print records through confluent-kafka's Consumer, one line each."""

from __future__ import annotations

import contextlib
import datetime
import re
import signal
import string
import sys
import time
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
    topic_metadata,
)

PLACEHOLDERS = ("topic", "partition", "offset", "key", "value", "timestamp", "time", "headers")
OFFSET_TAIL_BASE = -2000  # librdkafka's RD_KAFKA_OFFSET_TAIL(n) == -2000 - n
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def compile_format(text: str) -> str:
    """The --format template with \\t, \\n, \\r and \\\\ turned into characters, checked for unknown
    placeholders; raises click.BadParameter."""
    template = re.sub(r"\\([tnr\\])", lambda m: _ESCAPES[m.group(1)], text)
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--format") from None
    for f in fields:
        base = re.split(r"[.\[]", f, maxsplit=1)[0]
        if base not in PLACEHOLDERS:
            shown = "{" + f + "}" if f else "{}"
            raise click.BadParameter(f"unknown placeholder {shown}; use "
                                     + " ".join("{" + p + "}" for p in PLACEHOLDERS), param_hint="--format")
    try:
        template.format_map(_sample())
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as e:
        raise click.BadParameter(str(e), param_hint="--format") from None
    return template


def _sample() -> dict[str, Any]:
    return {"topic": "t", "partition": 0, "offset": 0, "key": "k", "value": "v", "timestamp": 0,
            "time": "1970-01-01T00:00:00.000Z", "headers": ""}


def parse_timestamp(text: str) -> int:
    """ISO 8601 (a time without a zone is local time) or milliseconds since the epoch -> epoch ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {text!r} (e.g. 2024-05-01T12:00:00Z)",
                                 param_hint="--timestamp") from None
    if when.tzinfo is None:
        when = when.astimezone()
    # exact integer arithmetic, rounding up: a record at or after the given instant
    since_epoch = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return -(-since_epoch // datetime.timedelta(milliseconds=1))


def _text(data: bytes | None) -> str:
    # surrogateescape keeps any bytes exactly as they were when written back out
    return "" if data is None else data.decode("utf-8", "surrogateescape")


def _iso(ms: int) -> str:
    if ms < 0:
        return ""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def render(template: str, msg: Any) -> str:
    _, ts = msg.timestamp()
    headers = msg.headers() or []
    fields = {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "key": _text(msg.key()), "value": _text(msg.value()), "timestamp": ts, "time": _iso(ts),
        "headers": ",".join(f"{k}={_text(v)}" for k, v in headers),
    }
    return template.format_map(fields)


@click.command(cls=StromCommand)
@click.argument("topic")
@click.option("-g", "--group", default=None,
              help="Consume as a member of this consumer group and commit its offsets.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the oldest record (with --group: when the group has no committed offset).")
@click.option("-o", "--offset", type=int, default=None,
              help="Start at this offset in each partition; negative: that many records before the end.")
@click.option("--timestamp", default=None, metavar="ISO",
              help="Start at the first record at or after this time (ISO 8601, or epoch milliseconds).")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Read only this partition (repeatable; default: all).")
@click.option("-n", "--max-messages", type=click.IntRange(min=1), default=None,
              help="Exit after this many records.")
@click.option("--timeout", "idle_timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Exit after this long without a new record.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Exit once every partition has been read to its end.")
@click.option("-f", "--format", "fmt", default="{value}", show_default=True,
              help="Output line; placeholders " + " ".join("{" + p + "}" for p in PLACEHOLDERS)
              + "; \\t and \\n allowed.")
@click.option("-q", "--quiet", is_flag=True, help="No summary line on stderr.")
@client_options
def consume(topic: str, group: str | None, from_beginning: bool, offset: int | None, timestamp: str | None,
            partitions: tuple[int, ...], max_messages: int | None, idle_timeout: float | None, exit_at_end: bool,
            fmt: str, quiet: bool, client: ClientOptions) -> None:
    """Print records of TOPIC, one line each, until Ctrl-C, --max-messages, --timeout or --exit-at-end.

    Without --group it reads the partitions directly, starting at the end unless told otherwise.
    """
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, Consumer, KafkaException

    template = compile_format(fmt)
    starts = [name for name, given in (("--from-beginning", from_beginning), ("--offset", offset is not None),
                                       ("--timestamp", timestamp is not None)) if given]
    if len(starts) > 1:
        raise click.UsageError(f"{' and '.join(starts)} cannot be used together")
    start_ms = parse_timestamp(timestamp) if timestamp is not None else None

    check_reachable(client)
    overrides: dict[str, Any] = {
        "group.id": group or "strom-cli",
        "enable.auto.commit": group is not None,
        "enable.auto.offset.store": group is not None,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": exit_at_end,
    }
    try:
        consumer = Consumer(base_config(client, **overrides))
    except KafkaException as e:
        raise Failure(f"cannot create consumer: {kafka_error_message(e.args[0])}") from None

    assigned: set[int] = set()
    at_end: set[int] = set()
    clock = _IdleClock()

    def positioned(tps: list[Any]) -> list[Any]:
        """Set the starting offset the options ask for on each TopicPartition."""
        if start_ms is not None:
            from confluent_kafka import TopicPartition

            query = [TopicPartition(topic, tp.partition, start_ms) for tp in tps]
            found = {r.partition: r.offset for r in consumer.offsets_for_times(query, timeout=client.connect_timeout)}
            for tp in tps:
                got = found.get(tp.partition, -1)
                tp.offset = got if got >= 0 else OFFSET_END
        elif offset is not None:
            for tp in tps:
                tp.offset = offset if offset >= 0 else OFFSET_TAIL_BASE + offset
        elif from_beginning and group is None:
            for tp in tps:
                tp.offset = OFFSET_BEGINNING
        elif group is None:
            for tp in tps:
                tp.offset = OFFSET_END
        else:
            for tp in tps:
                tp.offset = OFFSET_STORED
        return tps

    try:
        tmd = topic_metadata(consumer, client, topic)
        missing = [p for p in partitions if p not in tmd.partitions]
        if missing:
            raise Failure(f"topic '{topic}' has {len(tmd.partitions)} partitions; there is no partition {missing[0]}")
        if group is not None and not partitions:
            def on_assign(c: Any, tps: list[Any]) -> None:
                clock.touch()  # joining the group took a while; the idle time starts now
                assigned.update(tp.partition for tp in tps)
                c.assign(positioned(tps) if (offset is not None or start_ms is not None) else tps)

            def on_revoke(c: Any, tps: list[Any]) -> None:
                for tp in tps:
                    assigned.discard(tp.partition)
                    at_end.discard(tp.partition)

            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        else:
            from confluent_kafka import TopicPartition

            wanted = sorted(set(partitions)) if partitions else sorted(tmd.partitions)
            consumer.assign(positioned([TopicPartition(topic, p) for p in wanted]))
            assigned.update(wanted)
        count = _consume_loop(consumer, template, max_messages, idle_timeout, exit_at_end, assigned, at_end, clock)
    finally:
        _close_quietly(consumer)
    if not quiet:
        note(f"Consumed {count} record(s) from '{topic}'.")


def _close_quietly(consumer: Any) -> None:
    with contextlib.suppress(Exception):
        consumer.close()


class _IdleClock:
    def __init__(self) -> None:
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()

    def idle_for(self) -> float:
        return time.monotonic() - self.last


def _consume_loop(consumer: Any, template: str, max_messages: int | None, idle_timeout: float | None,
                  exit_at_end: bool, assigned: set[int], at_end: set[int], clock: _IdleClock) -> int:
    from confluent_kafka import KafkaError

    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        if stop:  # a second Ctrl-C: stop waiting for a clean close
            raise KeyboardInterrupt
        stop = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    out = sys.stdout.buffer
    warned: set[str] = set()
    count = 0
    clock.touch()
    try:
        while not stop:
            want = 500 if max_messages is None else max(1, min(500, max_messages - count))
            msgs = consumer.consume(num_messages=want, timeout=0.2)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or err.fatal():
                        raise Failure(kafka_error_message(err))
                    text = kafka_error_message(err)
                    if text not in warned:
                        warned.add(text)
                        note(f"warning: {text}")
                    continue
                at_end.discard(msg.partition())
                out.write(render(template, msg).encode("utf-8", "surrogateescape") + b"\n")
                count += 1
            if msgs:
                out.flush()
                clock.touch()
            if max_messages is not None and count >= max_messages:
                break
            if exit_at_end and assigned and assigned <= at_end:
                break
            if idle_timeout is not None and clock.idle_for() >= idle_timeout:
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        with contextlib.suppress(BrokenPipeError):
            out.flush()
    return count
