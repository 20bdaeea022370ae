"""``strom transactions``: list the transactions the coordinators know and describe one (Kafka's
kafka-transactions.sh list / describe).

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
from strom.cli.raw_connection import RawConnection
from strom.cli.reassign import _error_name

FIND_COORDINATOR = 10
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
    """Transactions: list the open and recent ones, describe one."""


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


def _describe(opts: ClientOptions, transactional_id: str) -> Any:
    from kio.schema.describe_transactions.v0 import request as req
    from kio.schema.types import TransactionalId

    host, port = _coordinator(opts, transactional_id)
    conn = _connect(host, port, opts)
    try:
        response = conn.request(DESCRIBE_TRANSACTIONS, 0, req.DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),)))
    finally:
        conn.close()
    state = response.transaction_states[0]
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
