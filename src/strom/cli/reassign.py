"""``strom topics reassign``: move a partition's replicas to other brokers (Kafka's
kafka-reassign-partitions), cancel a move, or list the moves under way.

confluent-kafka's AdminClient has no AlterPartitionReassignments, so the request goes to the
controller over a plain connection (PLAINTEXT listeners only), as ``topics describe`` does for
DescribeLogDirs.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import click

from strom.cli.common import (
    ClientOptions,
    Failure,
    admin_client,
    client_options,
    fetch_metadata,
    note,
    raw_security,
)
from strom.client.raw_connection import RawConnection

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46


def _controller(opts: ClientOptions) -> RawConnection:
    admin = admin_client(opts)
    md = fetch_metadata(admin, opts)
    broker = md.brokers.get(md.controller_id)
    if broker is None:
        raise Failure("the cluster has no controller right now; try again")
    try:
        return RawConnection(broker.host, broker.port, opts.connect_timeout, raw_security(opts))
    except OSError as e:
        raise Failure(f"cannot reach the controller (broker {md.controller_id}) at {broker.host}:{broker.port}: "
                      f"{e}") from None


def _alter(conn: RawConnection, topic: str, partition: int, replicas: list[int] | None) -> None:
    from kio.schema.alter_partition_reassignments.v0 import request as req
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i32, i32Timedelta

    body = req.AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topics=(req.ReassignableTopic(name=TopicName(topic), partitions=(req.ReassignablePartition(
            partition_index=i32(partition),
            replicas=None if replicas is None else tuple(BrokerId(b) for b in replicas)),)),))
    response = conn.request(ALTER_PARTITION_REASSIGNMENTS, 0, body)
    if int(response.error_code):
        raise Failure(f"the controller refused: {_error_name(int(response.error_code))} {response.error_message or ''}")
    for t in response.responses:
        for p in t.partitions:
            if int(p.error_code):
                raise Failure(f"{topic}-{partition}: {_error_name(int(p.error_code))}: {p.error_message or ''}")


def _ongoing(conn: RawConnection) -> list[dict[str, Any]]:
    from kio.schema.list_partition_reassignments.v0 import request as req
    from kio.static.primitive import i32Timedelta

    body = req.ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), topics=None)
    response = conn.request(LIST_PARTITION_REASSIGNMENTS, 0, body)
    if int(response.error_code):
        raise Failure(f"the controller refused: {_error_name(int(response.error_code))}")
    return [{"topic": t.name, "partition": int(p.partition_index), "replicas": list(p.replicas),
             "adding": list(p.adding_replicas), "removing": list(p.removing_replicas)}
            for t in response.topics for p in t.partitions]


def _error_name(code: int) -> str:
    from strom.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


@click.command()
@click.argument("topic", required=False)
@click.option("--partition", "-p", type=int, help="The partition to move.")
@click.option("--replicas", help="The new replicas, comma-separated broker ids, the preferred leader first.")
@click.option("--cancel", is_flag=True, help="Cancel the move of this partition (back to its old replicas).")
@click.option("--list", "list_", is_flag=True, help="List the moves under way.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the move is done.")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds --wait waits at most.")
@client_options
def reassign(topic: str | None, partition: int | None, replicas: str | None, cancel: bool, list_: bool, wait: bool,
             timeout: float, client: ClientOptions) -> None:
    """Move a partition's replicas: `strom topics reassign orders -p 0 --replicas 3,2`."""
    conn = _controller(client)
    try:
        if list_:
            moves = _ongoing(conn)
            if not moves:
                note("No reassignment in progress.")
            for m in moves:
                click.echo(f"{m['topic']}-{m['partition']}: replicas {m['replicas']} adding {m['adding']} "
                           f"removing {m['removing']}")
            return
        if topic is None or partition is None or (replicas is None) == (not cancel):
            raise click.UsageError("give TOPIC, --partition and either --replicas or --cancel")
        target = None
        if replicas is not None:
            try:
                target = [int(b) for b in replicas.split(",") if b.strip()]
            except ValueError:
                raise click.UsageError(f"--replicas {replicas!r}: broker ids separated by commas") from None
        _alter(conn, topic, partition, target)
        click.echo(f"{'Cancelling the move of' if cancel else 'Moving'} {topic}-{partition}"
                   + (f" to replicas {target}." if target else "."))
        if wait:
            deadline = time.monotonic() + timeout
            while any(m["topic"] == topic and m["partition"] == partition for m in _ongoing(conn)):
                if time.monotonic() > deadline:
                    raise Failure(f"{topic}-{partition} is still moving after {timeout:.0f}s (see --list)")
                time.sleep(0.2)
            click.echo("Done.")
    finally:
        conn.close()
