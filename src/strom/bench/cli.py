"""``strom bench produce|consume|e2e|rebalance``: throughput and latency of any Kafka-compatible broker, and
how long its consumer groups take to absorb a new member."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from strom.bench.common import DEFAULT_BATCH_SIZE, DEFAULT_LINGER_MS, BenchOptions, progress_enabled
from strom.bench.result import BenchResult
from strom.cli.common import ClientOptions, StromGroup, client_options, connection_options, out_console

DEFAULT_TOPIC = "strom-bench"


def _common(records: int, record_size: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--topic", default=DEFAULT_TOPIC, show_default=True, help="Topic to use."),
            click.option("--records", type=click.IntRange(min=0), default=records, show_default=True,
                         help="Number of records."),
            click.option("--record-size", type=click.IntRange(min=0), default=record_size, show_default=True,
                         metavar="BYTES", help="Size of each record value."),
            click.option("--duration", type=click.FloatRange(min=0), default=0.0, show_default=True,
                         metavar="SECONDS", help="Stop after this long even if not all records are done (0: no limit)."),
            click.option("--timeout", type=click.FloatRange(min=1), default=30.0, show_default=True,
                         metavar="SECONDS", help="Delivery timeout; and how long to wait for a record that does not come."),
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (no progress bar)."),
            click.option("--no-progress", is_flag=True, help="No live progress bar."),
        ]
        for opt in reversed(options):
            f = opt(f)
        return f

    return decorate


def _producer_options(target_rate: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--partitions", type=click.IntRange(min=1), default=None,
                         help="Create the topic with this many partitions if it is missing [default: 1]."),
            click.option("--replication-factor", type=click.IntRange(min=1), default=1, show_default=True,
                         help="Replication factor of a topic this command creates."),
            click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True),
            click.option("--linger-ms", type=click.IntRange(min=0), default=DEFAULT_LINGER_MS, show_default=True),
            click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE, show_default=True,
                         metavar="BYTES", help="Maximum bytes in one record batch (librdkafka batch.size)."),
            click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
                         default="none", show_default=True),
            click.option("--target-rate", type=click.FloatRange(min=0), default=target_rate, show_default=True,
                         metavar="RECORDS/S", help="Records per second to send (0: as fast as possible)."),
        ]
        for opt in reversed(options):
            f = opt(f)
        return f

    return decorate


_fetch_wait_option = click.option(
    "--fetch-wait-max-ms", type=click.IntRange(min=0), default=None,
    help="Consumer fetch.wait.max.ms [default: the client's, 500].")


def _emit(result: BenchResult, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        from strom.bench.report import render

        render(result, out_console())
    if not result.ok:
        sys.exit(1)


def _options(client: ClientOptions, kw: dict[str, Any]) -> BenchOptions:
    as_json = kw.pop("as_json")
    no_progress = kw.pop("no_progress")
    kw.setdefault("partitions", None)
    return BenchOptions(client=client, progress=progress_enabled(not (as_json or no_progress)), **kw)


def _with_json(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*, client: ClientOptions, **kw: Any) -> None:
        as_json = kw["as_json"]
        result = f(_options(client, kw))
        _emit(result, as_json)

    return wrapper


@click.group(cls=StromGroup)
@connection_options
def bench() -> None:
    """Measure a Kafka-compatible broker: producer and consumer throughput, delivery and end-to-end latency.

    Works against any broker (strom, Kafka, Redpanda, Tansu, ...) through confluent-kafka. The summary
    reports records/s, MB/s (2^20 bytes), latency percentiles and every record sent, acknowledged,
    failed and received; the exit code is 1 if any record was lost or failed.
    """


@bench.command("produce")
@_common(records=100_000, record_size=1024)
@_producer_options(target_rate=0.0)
@client_options
@_with_json
def produce_cmd(opts: BenchOptions) -> BenchResult:
    """Producer throughput and delivery latency (like kafka-producer-perf-test)."""
    from strom.bench.workloads import run_produce

    return run_produce(opts)


@bench.command("consume")
@_common(records=0, record_size=1024)
@_fetch_wait_option
@client_options
@_with_json
def consume_cmd(opts: BenchOptions) -> BenchResult:
    """Consumer throughput: read --records records (0: all the topic holds) from the beginning of every
    partition, assigned directly (no group), like kafka-consumer-perf-test.

    --record-size is ignored; the bytes counted are the values read. The consumer keeps its fetch
    pipeline full (queued.min.messages=1000000, fetch.queue.backoff.ms=10; change with -X): with
    librdkafka's defaults it pauses up to a second whenever 100,000 records wait locally.
    """
    from strom.bench.workloads import run_consume

    return run_consume(opts)


@bench.command("e2e")
@_common(records=10_000, record_size=1024)
@_producer_options(target_rate=1000.0)
@_fetch_wait_option
@client_options
@_with_json
def e2e_cmd(opts: BenchOptions) -> BenchResult:
    """End-to-end latency: produce at --target-rate and consume in the same process; each record carries
    the time it was produced, and the latency is its age when the consumer receives it."""
    from strom.bench.workloads import run_e2e

    return run_e2e(opts)


@bench.command("rebalance")
@click.option("--members", type=click.IntRange(min=1), default=50, show_default=True,
              help="Members of the group before one more joins.")
@click.option("--partitions", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Partitions of the topic (created, with a name of its own).")
@click.option("--rate", type=click.FloatRange(min=0.1), default=5.0, show_default=True, metavar="RECORDS/S",
              help="Records per second the steady producer writes to each partition.")
@click.option("--procs", type=click.IntRange(min=1), default=8, show_default=True,
              help="Worker processes the members run in (as threads); the joiner has one of its own.")
@click.option("--steady", type=click.FloatRange(min=0.5), default=5.0, show_default=True, metavar="SECONDS",
              help="Steady consumption measured before the join (the baseline gap).")
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs of each protocol, alternating.")
@click.option("--protocol", "protocols", type=click.Choice(["classic", "consumer"]), multiple=True,
              help="Protocols to measure [default: both].")
@click.option("--timeout", type=click.FloatRange(min=5), default=180.0, show_default=True, metavar="SECONDS",
              help="Bound on each wait (group formed, group stable after the join).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@client_options
def rebalance_cmd(members: int, partitions: int, rate: float, procs: int, steady: float, runs: int,
                  protocols: tuple[str, ...], timeout: float, as_json: bool, client: ClientOptions) -> None:
    """Time for a group to become stable after one more member joins, classic cooperative-sticky against
    the consumer protocol (KIP-848), with a steady producer; and how long partitions pause meanwhile.

    Uses the clients' defaults and whatever group settings the broker has (Kafka's defaults: the
    consumer protocol's heartbeat every 5 s, the classic client's every 3 s). See
    docs/performance.md for what each figure means.
    """
    from confluent_kafka.admin import NewTopic

    from strom.bench.rebalance import PROTOCOLS, run, summary_lines
    from strom.cli.common import admin_client, base_config, note

    properties = {k: v for k, v in base_config(client).items()
                  if k not in ("bootstrap.servers", "client.id", "logger", "allow.auto.create.topics")}

    def create(topic: str, n: int) -> None:
        admin = admin_client(client)  # held until the answer: a collected client cancels its requests
        futures = admin.create_topics([NewTopic(topic, n, 1)], request_timeout=60)
        futures[topic].result(timeout=90)

    results = run(client.bootstrap, members=members, partitions=partitions, rate=rate, procs=procs,
                  steady_s=steady, timeout=timeout, runs=runs, protocols=protocols or PROTOCOLS,
                  create_topic=create, log=note, properties=properties)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        for line in summary_lines(results):
            click.echo(line)
