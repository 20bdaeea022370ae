"""``strom transactions``: list the transactions the coordinators know, describe one, find hanging
ones and abort one (Kafka's kafka-transactions.sh list / describe / find-hanging / abort).

confluent-kafka's AdminClient has no ListTransactions or DescribeTransactions, so the requests go
over a connection of our own (with the -X security settings): ListTransactions to every broker
(each one lists the transactional ids it coordinates), DescribeTransactions to the coordinator that
FindCoordinator names.
"""

from __future__ import annotations

import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from strom.cli.common import (
    ClientOptions,
    Failure,
    StromGroup,
    admin_client,
    client_options,
    connection_options,
    raw_security,
)
from strom.cli.reassign import _error_name
from strom.client.raw_connection import RawConnection
from strom.clock import now_ms

FIND_COORDINATOR = 10
DESCRIBE_PRODUCERS = 61
LIST_TRANSACTIONS = 66
DESCRIBE_TRANSACTIONS = 65
TRANSACTION_KEY_TYPE = 1


def _brokers(opts: ClientOptions) -> list[tuple[int, str, int]]:
    from strom.cli.common import fetch_metadata

    md = fetch_metadata(admin_client(opts), opts)
    return sorted((b.id, b.host, b.port) for b in md.brokers.values())


def _connect(host: str, port: int, opts: ClientOptions) -> RawConnection:
    try:
        return RawConnection(host, port, opts.connect_timeout, raw_security(opts))
    except OSError as e:
        raise Failure(f"cannot reach {host}:{port}: {e}") from None


@click.group("transactions", cls=StromGroup, no_args_is_help=True)
@connection_options
def transactions() -> None:
    """Transactions: list the open and recent ones, describe one, find and abort hanging ones."""


@transactions.command("list")
@client_options
def list_transactions(client: ClientOptions) -> None:
    """List transactional ids with their producer id, state and coordinator."""
    from kio.schema.list_transactions.v1 import request as req
    from kio.static.primitive import i64

    table = Table("TRANSACTIONAL ID", "PRODUCER ID", "STATE", "COORDINATOR")
    for broker_id, host, port in _brokers(client):
        conn = _connect(host, port, client)
        try:
            response = conn.request(LIST_TRANSACTIONS, 1, req.ListTransactionsRequest(
                state_filters=(), producer_id_filters=(), duration_filter=i64(-1)))
        finally:
            conn.close()
        if int(response.error_code):
            raise Failure(f"broker {broker_id}: {_error_name(int(response.error_code))}")
        for t in response.transaction_states:
            table.add_row(str(t.transactional_id), str(int(t.producer_id)), str(t.transaction_state), str(broker_id))
    Console().print(table)


def _coordinator(opts: ClientOptions, transactional_id: str) -> tuple[str, int]:
    from kio.schema.find_coordinator.v3 import request as req
    from kio.static.primitive import i8

    _broker_id, host, port = _brokers(opts)[0]
    conn = _connect(host, port, opts)
    try:
        response = conn.request(FIND_COORDINATOR, 3, req.FindCoordinatorRequest(key=transactional_id,
                                                                                  key_type=i8(TRANSACTION_KEY_TYPE)))
    finally:
        conn.close()
    if int(response.error_code):
        raise Failure(f"no coordinator for {transactional_id}: {_error_name(int(response.error_code))}")
    return str(response.host), int(response.port)


def _describe_at(host: str, port: int, opts: ClientOptions, transactional_id: str) -> Any:
    """DescribeTransactions for one id, asked of the broker at host:port: its state entry."""
    from kio.schema.describe_transactions.v0 import request as req
    from kio.schema.types import TransactionalId

    conn = _connect(host, port, opts)
    try:
        response = conn.request(DESCRIBE_TRANSACTIONS, 0, req.DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),)))
    finally:
        conn.close()
    return response.transaction_states[0]


def _describe(opts: ClientOptions, transactional_id: str) -> Any:
    host, port = _coordinator(opts, transactional_id)
    state = _describe_at(host, port, opts, transactional_id)
    if int(state.error_code):
        raise Failure(f"{transactional_id}: {_error_name(int(state.error_code))}")
    return state


@transactions.command("describe")
@click.argument("transactional_id")
@client_options
def describe(transactional_id: str, client: ClientOptions) -> None:
    """Show a transactional id's producer, state, timeout, start time and partitions."""
    s = _describe(client, transactional_id)
    start = s.transaction_start_time
    started = "-" if start is None else start.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    partitions = ", ".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions) or "-"
    table = Table("TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "STARTED", "PARTITIONS")
    table.add_row(transactional_id, str(int(s.producer_id)), str(int(s.producer_epoch)), str(s.transaction_state),
                  str(int(s.transaction_timeout.total_seconds() * 1000)), started, partitions)
    Console().print(table)


_OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


def _open_transactions(client: ClientOptions, md: Any, partitions: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """DescribeProducers to each partition's leader: the producers with a transaction open there."""
    from kio.schema.describe_producers.v0 import request as req
    from kio.schema.types import TopicName
    from kio.static.primitive import i32

    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, partition in partitions:
        leader = md.topics[topic].partitions[partition].leader
        if leader >= 0:
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
    found = []
    for leader, topics in sorted(by_leader.items()):
        b = md.brokers[leader]
        conn = _connect(b.host, b.port, client)
        try:
            response = conn.request(DESCRIBE_PRODUCERS, 0, req.DescribeProducersRequest(topics=tuple(
                req.TopicRequest(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                for t, ps in sorted(topics.items()))))
        finally:
            conn.close()
        for t in response.topics:
            for p in t.partitions:
                if int(p.error_code):
                    raise Failure(f"{t.name}-{int(p.partition_index)}: {_error_name(int(p.error_code))}")
                for pr in p.active_producers:
                    if int(pr.current_txn_start_offset) >= 0:
                        found.append({"topic": str(t.name), "partition": int(p.partition_index),
                                      "producer_id": int(pr.producer_id), "producer_epoch": int(pr.producer_epoch),
                                      "coordinator_epoch": int(pr.coordinator_epoch),
                                      "start_offset": int(pr.current_txn_start_offset),
                                      "last_timestamp": int(pr.last_timestamp)})
    return found


def _transactional_ids(client: ClientOptions, md: Any, producer_ids: set[int]) -> dict[int, tuple[str, str, int]]:
    """producer id -> (transactional id, host, port of its coordinator), by ListTransactions with a
    producer id filter to every broker."""
    from kio.schema.list_transactions.v0 import request as req
    from kio.schema.types import ProducerId

    out: dict[int, tuple[str, str, int]] = {}
    for b in md.brokers.values():
        conn = _connect(b.host, b.port, client)
        try:
            response = conn.request(LIST_TRANSACTIONS, 0, req.ListTransactionsRequest(
                state_filters=(), producer_id_filters=tuple(ProducerId(p) for p in sorted(producer_ids))))
        finally:
            conn.close()
        for t in response.transaction_states:
            out[int(t.producer_id)] = (str(t.transactional_id), b.host, b.port)
    return out


def _is_hanging(client: ClientOptions, candidate: dict[str, Any], owner: tuple[str, str, int] | None) -> bool:
    """Kafka's rule: hanging when no coordinator knows the producer id, or its transactional id has
    no open transaction holding this partition."""
    if owner is None:
        return True
    txn_id, host, port = owner
    s = _describe_at(host, port, client, txn_id)
    if int(s.error_code) or int(s.producer_id) != candidate["producer_id"] or str(s.transaction_state) not in \
            _OPEN_STATES:
        return True
    return not any(str(t.topic) == candidate["topic"] and candidate["partition"] in (int(p) for p in t.partitions)
                   for t in s.topics)


@transactions.command("find-hanging")
@click.option("--topic", help="Look at this topic's partitions.")
@click.option("--partition", type=int, help="Only this partition of --topic.")
@click.option("--broker-id", type=int, help="Look at the partitions this broker leads.")
@click.option("--max-transaction-timeout", type=float, default=15.0, show_default=True,
              help="Minutes: the brokers' transaction.max.timeout.ms. Only a transaction whose last write "
                   "is older than this is a candidate.")
@client_options
def find_hanging(topic: str | None, partition: int | None, broker_id: int | None, max_transaction_timeout: float,
                 client: ClientOptions) -> None:
    """Find hanging transactions: open on a partition (holding its last stable offset back, so
    read_committed consumers stall) for longer than the max timeout, and unknown to every
    coordinator or no longer holding that partition. Without --topic or --broker-id every
    partition is looked at."""

    from strom.cli.common import fetch_metadata

    if partition is not None and topic is None:
        raise Failure("--partition needs --topic")
    md = fetch_metadata(admin_client(client), client)
    if topic is not None and topic not in md.topics:
        raise Failure(f"topic {topic} does not exist")
    if topic is not None and partition is not None and partition not in md.topics[topic].partitions:
        raise Failure(f"topic {topic} has no partition {partition}")
    chosen = [(t, p) for t, tm in md.topics.items() for p, pm in tm.partitions.items()
              if (topic is None or t == topic) and (partition is None or p == partition)
              and (broker_id is None or pm.leader == broker_id)]
    now = now_ms()
    max_ms = max_transaction_timeout * 60_000
    candidates = [c for c in _open_transactions(client, md, sorted(chosen)) if now - c["last_timestamp"] > max_ms]
    owners = _transactional_ids(client, md, {c["producer_id"] for c in candidates}) if candidates else {}
    hanging = [c for c in candidates if _is_hanging(client, c, owners.get(c["producer_id"]))]
    table = Table("TOPIC", "PARTITION", "PRODUCER ID", "PRODUCER EPOCH", "COORDINATOR EPOCH", "START OFFSET",
                  "LAST TIMESTAMP", "DURATION (MIN)")
    for h in hanging:
        last = datetime.datetime.fromtimestamp(h["last_timestamp"] / 1000, datetime.UTC)
        table.add_row(h["topic"], str(h["partition"]), str(h["producer_id"]), str(h["producer_epoch"]),
                      str(h["coordinator_epoch"]), str(h["start_offset"]), last.isoformat(timespec="milliseconds"),
                      str(int((now - h["last_timestamp"]) / 60_000)))
    Console().print(table)


WRITE_TXN_MARKERS = 27


@transactions.command("abort")
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", type=int, required=True, help="The partition holding the hanging transaction.")
@click.option("--start-offset", type=int, help="Where the transaction starts on the partition (find-hanging's "
                                               "START OFFSET): its producer is looked up.")
@click.option("--producer-id", type=int, help="Instead of --start-offset: the transaction's producer id ...")
@click.option("--producer-epoch", type=int, help="... and epoch.")
@click.option("--coordinator-epoch", type=int, default=0, show_default=True, help="With --producer-id.")
@client_options
def abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int, client: ClientOptions) -> None:
    """Abort a hanging transaction on one partition (Kafka's kafka-transactions.sh abort): an ABORT
    marker written to the partition's leader (WriteTxnMarkers), so its last stable offset moves on.
    Only for a transaction no coordinator will end: the coordinator of a live one is not told."""
    from kio.schema.types import ProducerId, TopicName
    from kio.schema.write_txn_markers.v1 import request as req
    from kio.static.primitive import i16, i32

    from strom.cli.common import fetch_metadata

    if (start_offset is None) == (producer_id is None):
        raise Failure("give either --start-offset or --producer-id and --producer-epoch")
    if producer_id is not None and producer_epoch is None:
        raise Failure("--producer-id needs --producer-epoch")
    md = fetch_metadata(admin_client(client), client)
    if topic not in md.topics or partition not in md.topics[topic].partitions:
        raise Failure(f"no partition {topic}-{partition}")
    if start_offset is not None:
        found = [t for t in _open_transactions(client, md, [(topic, partition)]) if t["start_offset"] == start_offset]
        if not found:
            raise Failure(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
        producer_id, producer_epoch = found[0]["producer_id"], found[0]["producer_epoch"]
        coordinator_epoch = max(found[0]["coordinator_epoch"], 0)
    assert producer_id is not None and producer_epoch is not None
    leader = md.brokers[md.topics[topic].partitions[partition].leader]
    conn = _connect(leader.host, leader.port, client)
    try:
        response = conn.request(WRITE_TXN_MARKERS, 1, req.WriteTxnMarkersRequest(markers=(req.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch), transaction_result=False,
            topics=(req.WritableTxnMarkerTopic(name=TopicName(topic), partition_indexes=(i32(partition),)),),
            coordinator_epoch=i32(coordinator_epoch)),)))
    finally:
        conn.close()
    error = int(response.markers[0].topics[0].partitions[0].error_code)
    if error:
        raise Failure(f"{topic}-{partition}: {_error_name(error)}")
    click.echo(f"aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on {topic}-{partition}")
