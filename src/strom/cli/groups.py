"""`strom groups`: list, describe (with lag), reset offsets of, delete offsets of, and delete consumer
groups and share groups (KIP-932; their requests are in cli/share_groups.py).

Built on confluent-kafka's AdminClient, so it works against any Kafka-compatible broker, the way
kafka-consumer-groups.sh does. The AdminClient tells a group's type (classic or consumer, KIP-848)
and, for a consumer group, each member's current and target assignment, but not the epochs or the
subscriptions: those come from ConsumerGroupDescribe (API 69), sent to the group's coordinator over
strom's own connection (with the -X security settings). Errors are one line on stderr and a nonzero
exit.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from strom.cli.common import (
    ClientOptions,
    StromGroup,
    admin_client,
    client_options,
    connection_options,
    raw_security,
)
from strom.cli.share_groups import (
    ShareGroupDetail,
    alter_share_offsets,
    delete_share_offsets,
    describe_share_group,
    list_share_groups,
    share_offsets,
)
from strom.client.raw_connection import RawConnection

TIMEOUT_S = 15.0
INACTIVE_STATES = {"EMPTY", "DEAD"}  # a reset is refused unless the group has no members
CONSUMER_GROUP_DESCRIBE = 69


def _fail(message: str) -> click.ClickException:
    return click.ClickException(" ".join(str(message).split()))


def _result(future: Any, what: str) -> Any:
    try:
        return future.result(timeout=TIMEOUT_S)
    except Exception as e:
        raise _fail(f"{what}: {_describe_error(e)}") from None


def _describe_error(e: Exception) -> str:
    from confluent_kafka import KafkaException

    if isinstance(e, KafkaException) and e.args:
        err = e.args[0]
        if hasattr(err, "str"):
            return str(err.str())
    return str(e) or type(e).__name__


def _state_name(state: Any) -> str:
    return str(getattr(state, "name", state)).upper()


def _type_name(group_type: Any) -> str:
    """"classic" or "consumer" (KIP-848); "unknown" when the broker does not say (ListGroups < v5)."""
    return str(getattr(group_type, "name", group_type or "unknown")).lower()


@click.group("groups", cls=StromGroup, no_args_is_help=True)
@connection_options
def groups() -> None:
    """Consumer and share groups: list, describe, reset-offsets, delete-offsets, delete."""


@groups.command("list")
@client_options
def list_groups(client: ClientOptions) -> None:
    """List the groups with their states and types (classic, consumer or share)."""
    admin = admin_client(client)  # held until the answer: a collected client cancels its requests
    result = _result(admin.list_consumer_groups(request_timeout=TIMEOUT_S), "list groups")
    if result.errors:
        raise _fail(f"list groups: {_describe_error(result.errors[0])}")
    shares = list_share_groups(client)
    rows = {g.group_id: (_state_name(g.state).title().replace("_", ""), _type_name(g.type))
            for g in result.valid if g.group_id not in shares}
    rows.update({g: (state, "share") for g, state in shares.items()})
    table = Table("GROUP", "STATE", "TYPE")
    for group_id in sorted(rows):
        table.add_row(group_id, *rows[group_id])
    Console().print(table)


@dataclass
class PartitionRow:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: str = "-"
    host: str = "-"
    client_id: str = "-"

    @property
    def lag(self) -> int | None:
        if self.log_end is None or self.committed is None:
            return None
        return max(self.log_end - self.committed, 0)


def _committed_offsets(admin: Any, group: str, partitions: list[Any] | None = None) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)],
                                                request_timeout=TIMEOUT_S)
    res = _result(futures[group], f"committed offsets of {group}")
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def _list_offsets(admin: Any, tps: Iterable[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    wanted = {TopicPartition(t, p): spec for t, p in tps}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=TIMEOUT_S)
    return {(tp.topic, tp.partition): _result(f, f"offsets of {tp.topic}-{tp.partition}").offset
            for tp, f in futures.items()}


@dataclass
class ConsumerMember:
    """A consumer-protocol member as ConsumerGroupDescribe tells it."""

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    member_epoch: int
    subscribed_topics: list[str]
    subscribed_regex: str | None
    current: dict[str, set[int]]
    target: dict[str, set[int]]


@dataclass
class ConsumerGroupDetail:
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ConsumerMember]


def _by_topic(assignment: Any) -> dict[str, set[int]]:
    return {str(t.topic_name): {int(p) for p in t.partitions} for t in assignment.topic_partitions}


def _consumer_group_detail(desc: Any, group: str, client: ClientOptions) -> ConsumerGroupDetail:
    """ConsumerGroupDescribe v1 at the coordinator the AdminClient found."""
    from kio.schema.consumer_group_describe.v1 import request as req
    from kio.schema.types import GroupId

    from strom.cli.reassign import _error_name

    node = desc.coordinator
    try:
        with RawConnection(node.host, node.port, client.connect_timeout, raw_security(client)) as conn:
            response = conn.request(CONSUMER_GROUP_DESCRIBE, 1, req.ConsumerGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False))
    except OSError as e:
        raise _fail(f"describe {group}: coordinator {node.host}:{node.port}: {e}") from None
    g = response.groups[0]
    if int(g.error_code):
        raise _fail(f"describe {group}: {_error_name(int(g.error_code))}")
    return ConsumerGroupDetail(str(g.group_state), int(g.group_epoch), int(g.assignment_epoch), str(g.assignor_name), [
        ConsumerMember(str(m.member_id), m.instance_id, str(m.client_id), str(m.client_host), int(m.member_epoch),
                       sorted(str(t) for t in m.subscribed_topic_names), m.subscribed_topic_regex,
                       _by_topic(m.assignment), _by_topic(m.target_assignment))
        for m in g.members])


def assignment_text(current: dict[str, set[int]], target: dict[str, set[int]]) -> str:
    """A member's assignment against its target, per topic: ``t 0,1,-2,+5`` where -N is a partition it
    still owns but must revoke, +N one it is to be given once its owner has released it."""
    out = []
    for topic in sorted(set(current) | set(target)):
        now, want = current.get(topic, set()), target.get(topic, set())
        marks = [("" if p in want else "-") + str(p) if p in now else f"+{p}" for p in sorted(now | want)]
        if marks:
            out.append(f"{topic} {','.join(marks)}")
    return "; ".join(out) or "-"


def _subscription_text(m: ConsumerMember) -> str:
    parts = list(m.subscribed_topics)
    if m.subscribed_regex:
        parts.append(f"regex {m.subscribed_regex}")
    return ", ".join(parts) or "-"


@groups.command("describe")
@click.argument("group")
@client_options
def describe(group: str, client: ClientOptions) -> None:
    """Type, state, members, assignment, committed offset, log end and lag per partition; for a consumer
    group (KIP-848) also its epochs and each member's epoch, subscription and target assignment."""
    from confluent_kafka.admin import OffsetSpec

    share = describe_share_group(client, group)
    if share is not None:
        _describe_share_group(share, client)
        return
    admin = admin_client(client)
    desc = _result(admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group], f"describe {group}")
    state = _state_name(desc.state)
    if state == "DEAD":
        raise _fail(f"consumer group '{group}' does not exist")
    kind = _type_name(getattr(desc, "type", None))
    detail = _consumer_group_detail(desc, group, client) if kind == "consumer" else None
    rows: dict[tuple[str, int], PartitionRow] = {}
    if detail is not None:
        # Owners from the same answer as the header and the members' table (the AdminClient's
        # describe came a moment earlier: a rebalance may have moved on since).
        for cm in detail.members:
            for topic, partitions in cm.current.items():
                for p in partitions:
                    rows[(topic, p)] = PartitionRow(topic, p, None, None, cm.member_id, cm.host, cm.client_id)
    else:
        for m in desc.members:
            for tp in m.assignment.topic_partitions:
                rows[(tp.topic, tp.partition)] = PartitionRow(tp.topic, tp.partition, None, None, m.member_id,
                                                              m.host, m.client_id)
    committed = _committed_offsets(admin, group)
    for tp, offset in committed.items():
        rows.setdefault(tp, PartitionRow(tp[0], tp[1], None, None)).committed = offset
    for tp, end in _list_offsets(admin, rows, OffsetSpec.latest()).items():
        rows[tp].log_end = end

    console = Console()
    # librdkafka knows the classic states only: a consumer group's Assigning or Reconciling is its
    # UNKNOWN. ConsumerGroupDescribe says it as the broker does.
    shown = detail.state if detail is not None else state.title().replace("_", "")
    header = (f"Group [bold]{group}[/bold]  type {kind}  state {shown}  "
              f"assignor {desc.partition_assignor or '-'}  members {len(desc.members)}")
    if detail is not None:
        header += f"  group epoch {detail.group_epoch}  target assignment epoch {detail.assignment_epoch}"
    console.print(header, highlight=False)
    if detail is not None:
        members = Table("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "EPOCH", "SUBSCRIPTION",
                        "ASSIGNMENT (-N: to revoke, +N: to assign)")
        for cm in sorted(detail.members, key=lambda cm: (cm.client_id, cm.member_id)):
            members.add_row(cm.member_id, cm.instance_id or "-", cm.client_id, cm.host, str(cm.member_epoch),
                            _subscription_text(cm), assignment_text(cm.current, cm.target))
        console.print(members)
    table = Table("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID")
    for key in sorted(rows):
        r = rows[key]
        table.add_row(r.topic, str(r.partition), _fmt(r.committed), _fmt(r.log_end), _fmt(r.lag), r.member,
                      r.host, r.client_id)
    console.print(table)
    if detail is None:
        for m in desc.members:
            if not m.assignment.topic_partitions:
                console.print(f"member {m.member_id} ({m.client_id}, {m.host}) has no partitions")


def _describe_share_group(detail: ShareGroupDetail, client: ClientOptions) -> None:
    """A share group: its members (every one is given every partition of its topics) and, per share
    partition, the start offset (everything before it is done) and the lag (records not yet
    acknowledged: the high watermark - the start offset - those after the start already done)."""
    console = Console()
    console.print(f"Group [bold]{detail.group_id}[/bold]  type share  state {detail.state}  assignor simple  "
                  f"members {len(detail.members)}  group epoch {detail.group_epoch}  "
                  f"target assignment epoch {detail.assignment_epoch}", highlight=False)
    if detail.members:
        members = Table("MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "SUBSCRIPTION", "ASSIGNMENT")
        for m in sorted(detail.members, key=lambda m: (m.client_id, m.member_id)):
            members.add_row(m.member_id, m.client_id, m.host, str(m.member_epoch), ", ".join(m.subscribed) or "-",
                            "; ".join(f"{t} {','.join(map(str, ps))}" for t, ps in sorted(m.assignment.items())) or "-")
        console.print(members)
    table = Table("TOPIC", "PARTITION", "START-OFFSET", "LAG")
    for r in share_offsets(client, detail):
        table.add_row(r.topic, str(r.partition), _fmt(r.start_offset), _fmt(r.lag))
    console.print(table)


def _fmt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _parse_topics(specs: tuple[str, ...], admin: Any) -> list[tuple[str, int]]:
    """`--topic T` (all partitions) or `--topic T:0,2` (Kafka's syntax for some partitions)."""
    out: list[tuple[str, int]] = []
    # All topics: asking for one by name would auto-create it on brokers that allow that.
    md = admin.list_topics(timeout=TIMEOUT_S)
    for spec in specs:
        name, _, parts = spec.partition(":")
        topic = md.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise _fail(f"topic '{name}' does not exist")
        if parts:
            try:
                wanted = [int(p) for p in parts.split(",")]
            except ValueError:
                raise _fail(f"bad partition list in '{spec}'") from None
            missing = [p for p in wanted if p not in topic.partitions]
            if missing:
                raise _fail(f"topic '{name}' has no partition {missing[0]}")
        else:
            wanted = sorted(topic.partitions)
        out.extend((name, p) for p in wanted)
    return out


def _parse_datetime(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise _fail(f"--to-datetime: '{text}' is not an ISO 8601 date-time") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, like kafka-consumer-groups.sh
    return int(when.timestamp() * 1000)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, help="Topic, or topic:p1,p2 (repeatable).")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-offset", type=int, default=None, help="Reset to this offset (clamped to the log).")
@click.option("--to-datetime", default=None, help="Reset to the first offset at or after this ISO time.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (may be negative).")
@click.option("--dry-run", is_flag=True, help="Show the new offsets without committing them.")
@client_options
def reset_offsets(group: str, topics: tuple[str, ...], to_earliest: bool, to_latest: bool, to_offset: int | None,
                  to_datetime: str | None, shift_by: int | None, dry_run: bool, client: ClientOptions) -> None:
    """Set a group's committed offsets (a share group's share-partition start offsets); refused while
    the group has active members."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    chosen = [n for n, v in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                             ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime is not None),
                             ("--shift-by", shift_by is not None)) if v]
    if len(chosen) != 1:
        raise _fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
    admin = admin_client(client)
    share = describe_share_group(client, group)
    if share is not None:
        if share.members:
            raise _fail(f"share group '{group}' is active ({share.state}, {len(share.members)} members): "
                        "stop its consumers before resetting offsets")
    else:
        desc = _result(admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group],
                       f"describe {group}")
        state = _state_name(desc.state)
        if state not in INACTIVE_STATES:
            raise _fail(f"group '{group}' is active ({state.title().replace('_', '')}, {len(desc.members)} "
                        "members): stop its consumers before resetting offsets")
    tps = _parse_topics(topics, admin)
    earliest = _list_offsets(admin, tps, OffsetSpec.earliest())
    latest = _list_offsets(admin, tps, OffsetSpec.latest())
    if share is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        current = {(r.topic, r.partition): r.start_offset for r in share_offsets(client, share, by_topic)
                   if r.start_offset is not None}
    else:
        current = _committed_offsets(admin, group, [TopicPartition(t, p) for t, p in tps])

    target: dict[tuple[str, int], int] = {}
    if to_earliest:
        target = dict(earliest)
    elif to_latest:
        target = dict(latest)
    elif to_offset is not None:
        target = {tp: to_offset for tp in tps}
    elif to_datetime is not None:
        found = _list_offsets(admin, tps, OffsetSpec.for_timestamp(_parse_datetime(to_datetime)))
        target = {tp: off if off >= 0 else latest[tp] for tp, off in found.items()}
    elif shift_by is not None:
        for tp in tps:
            if tp not in current:
                raise _fail(f"cannot shift {tp[0]}-{tp[1]}: the group has no committed offset there")
            target[tp] = current[tp] + shift_by
    # Like Kafka's tool: never point outside the log.
    target = {tp: min(max(off, earliest[tp]), latest[tp]) for tp, off in target.items()}

    table = Table("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
    for t, p in sorted(target):
        table.add_row(t, str(p), _fmt(current.get((t, p))), str(target[(t, p)]))
    console = Console()
    console.print(table)
    if dry_run:
        console.print("dry run: nothing committed")
        return
    if share is not None:
        alter_share_offsets(client, share, target)
        console.print(f"set the start offsets of {len(target)} share partitions of share group {group}")
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(target.items())])
    res = _result(admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group],
                  f"reset offsets of {group}")
    failed = [tp for tp in res.topic_partitions if tp.error is not None]
    if failed:
        raise _fail(f"reset failed for {failed[0].topic}-{failed[0].partition}: {failed[0].error.str()}")
    console.print(f"committed new offsets for {len(target)} partitions of group {group}")


@groups.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True,
              help="Topic (repeatable); for a consumer group also topic:p1,p2.")
@client_options
def delete_offsets(group: str, topics: tuple[str, ...], client: ClientOptions) -> None:
    """Delete a group's offsets for the given topics: a share group's share-partition state (it must have
    no members; its next consumers start where share.auto.offset.reset says), or a consumer group's
    committed offsets of partitions it does not consume."""
    share = describe_share_group(client, group)
    if share is not None:
        if any(":" in t for t in topics):
            raise _fail("a share group's offsets are deleted for whole topics: give --topic NAME")
        delete_share_offsets(client, share, list(dict.fromkeys(topics)))
        click.echo(f"deleted the offsets of share group {group} for {', '.join(dict.fromkeys(topics))}")
        return
    admin = admin_client(client)
    desc = _result(admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group], f"describe {group}")
    if _state_name(desc.state) == "DEAD":
        raise _fail(f"group '{group}' does not exist")
    tps = _parse_topics(topics, admin)
    _offset_delete(desc, group, tps, client)
    click.echo(f"deleted the committed offsets of group {group} for {len(tps)} partitions")


def _offset_delete(desc: Any, group: str, tps: list[tuple[str, int]], client: ClientOptions) -> None:
    """OffsetDelete (47) at the coordinator the AdminClient found (the AdminClient has no call for it)."""
    from kio.schema.offset_delete.v0 import request as req
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32

    from strom.cli.share_groups import error_name

    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    node = desc.coordinator
    try:
        with RawConnection(node.host, node.port, client.connect_timeout, raw_security(client)) as conn:
            r = conn.request(47, 0, req.OffsetDeleteRequest(group_id=GroupId(group), topics=tuple(
                req.OffsetDeleteRequestTopic(name=TopicName(t), partitions=tuple(
                    req.OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps))
                for t, ps in by_topic.items())))
    except OSError as e:
        raise _fail(f"delete offsets of {group}: coordinator {node.host}:{node.port}: {e}") from None
    if int(r.error_code):
        raise _fail(f"delete offsets of {group}: {error_name(int(r.error_code))}")
    for t in r.topics:
        for p in t.partitions:
            if int(p.error_code):
                raise _fail(f"delete offsets of {group} on {t.name}-{p.partition_index}: "
                            f"{error_name(int(p.error_code))}")


@groups.command("delete")
@click.argument("group")
@client_options
def delete(group: str, client: ClientOptions) -> None:
    """Delete a group (it must have no members) and its committed offsets."""
    admin = admin_client(client)
    _result(admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group], f"delete {group}")
    click.echo(f"deleted group {group}")
