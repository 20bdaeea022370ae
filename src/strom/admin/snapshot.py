"""Read-only views of a running broker for the REST API and the metrics collector, read through
``BrokerView`` (admin/view.py), never the Broker itself.

Everything here runs on the broker's event loop (the single writer), so it reads live state without
locks. Reads are bounded: a message browse reads at most ``MAX_MESSAGES`` records and a few MiB.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom import __version__
from strom.protocol.errors import ErrorCode as E
from strom.records import batch as rb
from strom.records import codec

if TYPE_CHECKING:
    from strom.admin.view import BrokerView, TxnReader
    from strom.cluster.metadata import TopicInfo
    from strom.storage.log import PartitionLog

MAX_MESSAGES = 500
MAX_SHOWN_BYTES = 64 * 1024  # key/value bytes returned per record; the full size is reported
_READ_CHUNK = 1 << 20
_MAX_READS = 64


def is_ready(view: BrokerView) -> tuple[bool, str]:
    """Ready = logs loaded, group coordinator replayed, every Kafka listener accepting.

    The broker opens its Kafka listeners only after loading the logs and replaying the groups, and
    closes them first when it stops, so serving listeners mean both."""
    if not view.kafka_listeners_serving():
        return False, "stopping: kafka listeners closed" if view.started else "starting: loading logs"
    coordinator = view.group_coordinator()
    if coordinator is not None and not coordinator.loaded:
        return False, "group coordinator not loaded"
    return True, "ready"


def api_names(view: BrokerView) -> dict[int, str]:
    """Kafka's API names (Produce, ApiVersions, ...) from the handler modules' names."""
    return {key: "".join(p.capitalize() for p in name.split("_")) for key, name in view.handler_names().items()}


# ---------------------------------------------------------------------------------------------- topics


def replica_states(view: BrokerView, info: TopicInfo) -> list[dict[str, Any]]:
    """Leader, replicas, ISR and offline replicas of each partition, as Metadata tells clients (on a
    single broker: this broker leads every partition, alone in its ISR)."""
    return [{"partition": e["partition_index"], "leader": e["leader_id"], "replicas": list(e["replica_nodes"]),
             "isr": list(e["isr_nodes"]), "offline_replicas": list(e["offline_replicas"]),
             # Kafka's kafka-topics --under-replicated-partitions / --unavailable-partitions
             "under_replicated": e["leader_id"] >= 0 and len(e["isr_nodes"]) < len(e["replica_nodes"]),
             "offline": e["leader_id"] < 0}
            for e in view.metadata_partitions(info)]


def partition_view(plog: PartitionLog | None, replicas: dict[str, Any]) -> dict[str, Any]:
    """A partition's replica state with this broker's own replica of it (offsets 0 when it has none)."""
    if plog is None:
        return {**replicas, "log_start_offset": 0, "high_watermark": 0, "log_end_offset": 0, "size_bytes": 0,
                "messages": 0}
    return {
        **replicas,
        "log_start_offset": plog.log_start_offset,
        "high_watermark": plog.high_watermark,
        "log_end_offset": plog.log_end_offset,
        "size_bytes": plog.size_bytes(),
        "messages": plog.high_watermark - plog.log_start_offset,
    }


def topic_view(view: BrokerView, name: str, *, with_partitions: bool) -> dict[str, Any] | None:
    info = view.metadata.get_topic(name)
    if info is None:
        return None
    lm = view.log_manager
    parts = [partition_view(lm.get_log(name, r["partition"]), r) for r in replica_states(view, info)]
    stats = view.metrics.topics.get(name)
    out: dict[str, Any] = {
        "name": name,
        "topic_id": str(info.topic_id),
        "internal": info.internal,
        "partitions": info.partitions,
        "replication_factor": max((len(p["replicas"]) for p in parts), default=0),
        "under_replicated_partitions": sum(1 for p in parts if p["under_replicated"]),
        "offline_partitions": sum(1 for p in parts if p["offline"]),
        "size_bytes": sum(p["size_bytes"] for p in parts),
        "messages": sum(p["messages"] for p in parts),
        "end_offsets": sum(p["high_watermark"] for p in parts),
        "bytes_in": stats.bytes_in if stats else 0,
        "bytes_out": stats.bytes_out if stats else 0,
        "records_in": stats.records_in if stats else 0,
        "records_out": stats.records_out if stats else 0,
        "configs": dict(sorted(info.configs.items())),
    }
    if with_partitions:
        out["partition_list"] = parts
    return out


def topics_view(view: BrokerView) -> list[dict[str, Any]]:
    out = []
    for name in sorted(view.metadata.topics()):
        entry = topic_view(view, name, with_partitions=False)
        if entry is not None:
            out.append(entry)
    return out


# ---------------------------------------------------------------------------------------------- cluster


def _problem_partitions(view: BrokerView) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """(partitions, under-replicated ones, offline ones) over every topic."""
    total = 0
    under: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    topics = view.metadata.topics()
    for name in sorted(topics):
        for r in replica_states(view, topics[name]):
            total += 1
            if r["under_replicated"] or r["offline"]:
                row = {"topic": name, **{k: v for k, v in r.items() if k not in ("under_replicated", "offline")}}
                (offline if r["offline"] else under).append(row)
    return total, under, offline


def offline_partition_count(view: BrokerView) -> int:
    return len(_problem_partitions(view)[2])


def cluster_view(view: BrokerView) -> dict[str, Any]:
    """The brokers and the controller as this broker knows them, and the partitions that are
    under-replicated (a leader, but an ISR smaller than the replicas) or offline (no live leader)."""
    brokers, controller = view.brokers_and_controller()
    total, under, offline = _problem_partitions(view)
    me = view.config.broker_id
    return {
        "cluster_id": view.metadata.cluster_id,
        "controller_id": controller,
        "broker_id": me,
        "brokers": [{"id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"],
                     "controller": b["node_id"] == controller, "self": b["node_id"] == me} for b in brokers],
        "partitions": total,
        "under_replicated_partitions": under,
        "offline_partitions": offline,
    }


def totals(view: BrokerView) -> tuple[int, int, int, int]:
    """(bytes in, bytes out, records in, records out) over all topics since the broker started."""
    bi = bo = ri = ro = 0
    for stats in view.metrics.topics.values():
        bi += stats.bytes_in
        bo += stats.bytes_out
        ri += stats.records_in
        ro += stats.records_out
    return bi, bo, ri, ro


def overview(view: BrokerView, history: Iterable[list[float]] = ()) -> dict[str, Any]:
    ready, reason = is_ready(view)
    m = view.metrics
    topics = view.metadata.topics() if ready else {}
    bi, bo, ri, ro = totals(view)
    size = sum(plog.size_bytes() for plog in view.log_manager.all_logs()) if ready else 0
    groups = len(list_groups(view)) if ready else 0
    cfg = view.config
    brokers, controller = view.brokers_and_controller()
    _, under, offline = _problem_partitions(view) if ready else (0, [], [])
    return {
        "broker": {
            "id": cfg.broker_id,
            "cluster_id": view.metadata.cluster_id,
            "version": __version__,
            "host": view.node.host,
            "port": view.node.port,
            "listeners": [str(x) for x in cfg.listeners],
            "log_dirs": [str(d) for d in cfg.log_dirs],
            "uptime_seconds": round(time.time() - m.start_time, 1),
            "ready": ready,
            "status": reason,
        },
        "topics": sum(1 for t in topics.values() if not t.internal),
        "internal_topics": sum(1 for t in topics.values() if t.internal),
        "partitions": sum(t.partitions for t in topics.values()),
        "size_bytes": size,
        "connections": view.connection_count(),
        "groups": groups,
        "cluster": {"brokers": len(brokers), "controller_id": controller, "under_replicated_partitions": len(under),
                    "offline_partitions": len(offline)},
        "requests": sum(s.count for s in m.requests.values()),
        "totals": {"bytes_in": bi, "bytes_out": bo, "records_in": ri, "records_out": ro},
        "time": time.time(),
        # [time, bytes in, bytes out, records in, records out], oldest first: the console's charts
        "history": list(history),
    }


# ---------------------------------------------------------------------------------------------- messages


@dataclass
class MessageQuery:
    limit: int = 50
    offset: int | None = None
    timestamp: int | None = None  # ms since the epoch


def _b64(data: bytes | None) -> str | None:
    if data is None:
        return None
    return base64.b64encode(data[:MAX_SHOWN_BYTES]).decode("ascii")


def _complete_batches(data: bytes) -> list[rb.BatchHeader]:
    end = 0
    while end + rb.LOG_OVERHEAD <= len(data):
        (length,) = struct.unpack_from(">i", data, end + 8)
        if length <= 0 or end + rb.LOG_OVERHEAD + length > len(data):
            break
        end += rb.LOG_OVERHEAD + length
    return rb.iter_batches(memoryview(data)[:end], verify_crc=False) if end else []


def read_messages(plog: PartitionLog, query: MessageQuery) -> dict[str, Any]:
    """Records of one partition: the newest ``limit``, or ``limit`` from an offset or a timestamp."""
    limit = max(1, min(query.limit, MAX_MESSAGES))
    start, hw = plog.log_start_offset, plog.high_watermark
    if query.timestamp is not None:
        found = plog.offset_for_timestamp(query.timestamp)
        first = found[0] if found is not None else hw
    elif query.offset is not None:
        first = min(max(query.offset, start), hw)
    else:
        first = max(start, hw - limit)
    records: list[dict[str, Any]] = []
    position = first
    max_size = codec.max_inflated_size(plog.config.max_message_bytes)
    for _ in range(_MAX_READS):
        if position >= hw or len(records) >= limit:
            break
        data = plog.read(position, _READ_CHUNK)
        if not data:
            break
        data = bytes(data)
        headers = _complete_batches(data)
        if not headers:
            break
        for h in headers:
            if not h.is_control:
                log_append_time = bool(h.attributes & rb.TIMESTAMP_TYPE_MASK)
                try:
                    for r in codec.iter_records(data, h, max_size):
                        if r.offset < position or len(records) >= limit:
                            continue
                        records.append(_record_view(r, h.max_timestamp if log_append_time else r.timestamp,
                                                    "LogAppendTime" if log_append_time else "CreateTime"))
                except rb.InvalidRecordBatch:
                    pass  # a batch that cannot be read (corrupt, or inflating past the bound) shows nothing
            position = max(position, h.next_offset)
    return {
        "topic": plog.topic,
        "partition": plog.partition,
        "log_start_offset": start,
        "high_watermark": hw,
        "first_offset": first,
        "next_offset": position,
        "records": records,
    }


def _record_view(r: codec.Record, timestamp: int, timestamp_type: str) -> dict[str, Any]:
    return {
        "offset": r.offset,
        "timestamp": timestamp,
        "timestamp_type": timestamp_type,
        "key": _b64(r.key),
        "key_size": -1 if r.key is None else len(r.key),
        "value": _b64(r.value),
        "value_size": -1 if r.value is None else len(r.value),
        "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers],
    }


# ---------------------------------------------------------------------------------------------- groups


def decode_assignment(data: bytes) -> list[dict[str, Any]] | None:
    """A ConsumerProtocolAssignment (any version): [{"topic", "partitions"}]; None if unreadable."""
    if not data:
        return []
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 0:
            return None
        (count,) = struct.unpack_from(">i", data, 2)
        if count < 0 or count > len(data):
            return None
        pos = 6
        out = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topic = data[pos : pos + n].decode()
            pos += n
            (np_,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if np_ < 0 or pos + 4 * np_ > len(data):
                return None
            parts = list(struct.unpack_from(f">{np_}i", data, pos))
            pos += 4 * np_
            out.append({"topic": topic, "partitions": sorted(parts)})
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def list_groups(view: BrokerView) -> list[Any]:
    coordinator = view.group_coordinator()
    if coordinator is None or not coordinator.loaded:
        return []
    return sorted(coordinator.list_groups(None, None), key=lambda g: g.group_id)


def group_offsets(view: BrokerView, group_id: str) -> list[dict[str, Any]]:
    """Committed offset, end offset (high watermark) and lag of every partition the group committed."""
    coordinator = view.group_coordinator()
    assert coordinator is not None  # asked only for a group the loaded coordinator listed or described
    out = []
    for fo in coordinator.fetch_offsets(group_id, None):
        if fo.offset < 0:
            continue
        plog = view.log_manager.get_log(fo.topic, fo.partition)
        end = plog.high_watermark if plog is not None else None
        lag = max(0, end - fo.offset) if end is not None else None
        out.append({"topic": fo.topic, "partition": fo.partition, "committed": fo.offset,
                    "end_offset": end, "lag": lag, "metadata": fo.metadata})
    return out


def _consumer_group(view: BrokerView, group_id: str) -> Any | None:
    """The group as ConsumerGroupDescribe tells it, if it is a consumer-protocol (KIP-848) group."""
    coordinator = view.group_coordinator()
    assert coordinator is not None
    described = coordinator.describe_consumer_group(group_id)
    return described if described.error is E.none else None


def _named_assignment(assignment: dict[Any, tuple[int, ...]], names: dict[Any, str]) -> list[dict[str, Any]]:
    out = [{"topic": names.get(topic_id, str(topic_id)), "partitions": sorted(parts)}
           for topic_id, parts in assignment.items() if parts]
    return sorted(out, key=lambda a: a["topic"])


def _difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The partitions of ``a`` that ``b`` lacks, per topic."""
    other = {x["topic"]: set(x["partitions"]) for x in b}
    out = [{"topic": x["topic"], "partitions": [p for p in x["partitions"] if p not in other.get(x["topic"], set())]}
           for x in a]
    return [x for x in out if x["partitions"]]


def group_view(view: BrokerView, group_id: str, *, detail: bool) -> dict[str, Any] | None:
    """A group of either type: ``type`` "classic" (JoinGroup/SyncGroup; ``protocol`` is the assignor
    the members chose) or "consumer" (KIP-848; the broker's assignor, the group epoch and the target
    assignment epoch, and per member its epoch, subscription, assignment and target assignment, with
    the partitions still to revoke and to assign)."""
    coordinator = view.group_coordinator()
    if coordinator is None or not coordinator.loaded:
        return None
    share = coordinator.describe_share_group(group_id)
    if share.error is E.none:
        return _share_group_view(view, share, detail=detail)
    consumer = _consumer_group(view, group_id)
    described = coordinator.describe_group(group_id) if consumer is None else None
    if described is not None and described.state == "Dead":
        return None
    offsets = group_offsets(view, group_id)
    lags = [o["lag"] for o in offsets if o["lag"] is not None]
    out: dict[str, Any] = {"group_id": group_id, "lag": sum(lags), "topics": sorted({o["topic"] for o in offsets})}
    if consumer is not None:
        out.update({"type": "consumer", "state": consumer.state, "protocol_type": "consumer",
                    "protocol": consumer.assignor_name, "members": len(consumer.members),
                    "group_epoch": consumer.group_epoch, "assignment_epoch": consumer.assignment_epoch})
    else:
        assert described is not None
        out.update({"type": "classic", "state": described.state, "protocol_type": described.protocol_type,
                    "protocol": described.protocol_data, "members": len(described.members),
                    "group_epoch": None, "assignment_epoch": None})
    if not detail:
        return out
    owner: dict[tuple[str, int], str] = {}
    members = []
    if consumer is not None:
        names = {t.topic_id: name for name, t in view.metadata.topics().items()}
        for cm in consumer.members:
            current = _named_assignment(cm.assignment, names)
            target = _named_assignment(cm.target_assignment, names)
            for a in current:
                for p in a["partitions"]:
                    owner[(a["topic"], p)] = cm.member_id
            members.append({
                "member_id": cm.member_id, "group_instance_id": cm.instance_id, "client_id": cm.client_id,
                "client_host": cm.client_host, "member_epoch": cm.member_epoch,
                "subscribed_topic_names": list(cm.subscribed_topic_names),
                "subscribed_topic_regex": cm.subscribed_topic_regex,
                "assignment": current, "target_assignment": target,
                "to_revoke": _difference(current, target), "to_assign": _difference(target, current)})
        members.sort(key=lambda m: (m["client_id"], m["member_id"]))
    else:
        assert described is not None
        for m in described.members:
            assignment = decode_assignment(m.assignment) if described.protocol_type == "consumer" else None
            for a in assignment or []:
                for p in a["partitions"]:
                    owner[(a["topic"], p)] = m.member_id
            members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "assignment": assignment or []})
    for o in offsets:
        o["member_id"] = owner.get((o["topic"], o["partition"]))
    out["member_list"] = members
    out["offsets"] = offsets
    return out


def _share_group_view(view: BrokerView, share: Any, *, detail: bool) -> dict[str, Any]:
    """A share group (KIP-932): its members, each given every partition of its topics, and per share
    partition its start offset (as ``committed``: everything before it is done) and lag."""
    offsets = view.share_offsets(share.group_id)
    lags = [o["lag"] for o in offsets if o["lag"] is not None]
    out: dict[str, Any] = {"group_id": share.group_id, "lag": sum(lags), "topics": sorted({o["topic"] for o in offsets}),
                           "type": "share", "state": share.state, "protocol_type": "share", "protocol": "simple",
                           "members": len(share.members), "group_epoch": share.group_epoch,
                           "assignment_epoch": share.assignment_epoch}
    if not detail:
        return out
    names = {t.topic_id: name for name, t in view.metadata.topics().items()}
    out["member_list"] = sorted(({"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                                  "client_host": m.client_host, "member_epoch": m.member_epoch,
                                  "subscribed_topic_names": list(m.subscribed_topic_names),
                                  "assignment": _named_assignment(m.assignment, names)} for m in share.members),
                                key=lambda m: (m["client_id"], m["member_id"]))
    for o in offsets:
        o["member_id"] = None  # every member shares every partition
    out["offsets"] = offsets
    return out


# ---------------------------------------------------------------------------------------------- transactions

_OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def _txn_coordinator(view: BrokerView) -> TxnReader | None:
    coord = view.txn_coordinator()
    return coord if coord is not None and coord.loaded else None


def transaction_view(meta: Any, now: int) -> dict[str, Any]:
    """One transactional id as DescribeTransactions tells it, with the age of its transaction."""
    state = meta.state.display
    is_open = state in _OPEN_STATES
    return {
        "transactional_id": meta.transactional_id,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "state": state,
        "open": is_open,
        "timeout_ms": meta.timeout_ms,
        "start_time": meta.start_ms if meta.start_ms >= 0 else None,
        "age_ms": now - meta.start_ms if is_open and meta.start_ms >= 0 else None,
        "last_update": meta.last_update_ms,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(meta.partitions)],
    }


def transactions(view: BrokerView, now: int) -> list[dict[str, Any]]:
    """Every transactional id this broker coordinates now (ListTransactions), open ones first."""
    coord = _txn_coordinator(view)
    if coord is None:
        return []
    views = [transaction_view(m, now) for t, m in coord.shard.txns.items() if coord.error_for(t) is E.none]
    return sorted(views, key=lambda v: (not v["open"], v["transactional_id"]))


def transaction(view: BrokerView, transactional_id: str, now: int) -> dict[str, Any] | None:
    coord = _txn_coordinator(view)
    if coord is None:
        return None
    meta = coord.shard.txns.get(transactional_id)
    if meta is None or coord.error_for(transactional_id) is not E.none:
        return None
    return transaction_view(meta, now)


def transaction_counters(view: BrokerView) -> dict[str, int]:
    coord = view.txn_coordinator()
    if coord is None:
        return {"committed": 0, "aborted": 0, "timed_out": 0, "expired": 0}
    return {"committed": coord.commits, "aborted": coord.aborts, "timed_out": coord.timeouts,
            "expired": coord.expired}


def producers_view(view: BrokerView, topic: str) -> list[dict[str, Any]] | None:
    """DescribeProducers for every partition of a topic this broker has a log of: each producer's
    epoch, last sequence and timestamp and where its open transaction starts (-1: none), with the
    partition's last stable offset."""
    info = view.metadata.get_topic(topic)
    if info is None:
        return None
    out = []
    for partition in range(info.partitions):
        plog = view.log_manager.get_log(topic, partition)
        if plog is None:
            continue
        out.append({
            "partition": partition,
            "high_watermark": plog.high_watermark,
            "last_stable_offset": plog.last_stable_offset,
            "producers": [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
                           "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp,
                           "current_txn_start_offset": e.current_txn_first_offset}
                          for e in sorted(plog.producer_state.producers.values(), key=lambda e: e.producer_id)],
        })
    return out


def coordinates_every_transaction(view: BrokerView) -> bool:
    """Whether this broker coordinates every partition of __transaction_state (always on a single
    broker): only then can it tell that no coordinator knows a partition's open transaction."""
    coord = _txn_coordinator(view)
    if coord is None:
        return False
    if view.replication().one_node:
        return True
    return set(coord.placement.owned) >= set(range(coord.num_partitions))


def hanging_transactions(view: BrokerView, now: int, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Open transactions on partitions this broker leads that look abandoned (KIP-664's
    find-hanging): the producer's last write is older than transaction.max.timeout.ms (the
    coordinator would have aborted any transaction of its own by then), or the coordinator, when it
    is this broker, has no ongoing transaction of that producer with this partition in it. Such a
    transaction holds the partition's last stable offset back: read_committed consumers stall."""
    coord = _txn_coordinator(view)
    max_timeout = int(view.config.transaction_max_timeout_ms)
    by_pid: dict[int, Any] = {}
    decidable = coordinates_every_transaction(view)
    if coord is not None:
        for txn in coord.shard.txns.values():
            if txn.state.display in _OPEN_STATES:
                by_pid[txn.producer_id] = txn
    wanted = set(topics) if topics is not None else None
    out = []
    for plog in view.log_manager.all_logs():
        if plog.closed or not plog.producer_state.ongoing_txns or (wanted is not None and plog.topic not in wanted):
            continue
        if view.leader_log(plog.topic, plog.partition) is not plog:
            continue  # a follower: its leader answers for it
        for pid, first_offset in plog.producer_state.ongoing_txns.items():
            entry = plog.producer_state.producers.get(pid)
            if entry is None:
                continue
            reasons = []
            if now - entry.last_timestamp > max_timeout:
                reasons.append("older than transaction.max.timeout.ms")
            meta = by_pid.get(pid)
            if decidable and (meta is None or (plog.topic, plog.partition) not in meta.partitions):
                reasons.append("no ongoing transaction of this producer at the coordinator")
            if reasons:
                out.append({"topic": plog.topic, "partition": plog.partition, "producer_id": pid,
                            "producer_epoch": entry.producer_epoch, "start_offset": first_offset,
                            "last_timestamp": entry.last_timestamp, "age_ms": now - entry.last_timestamp,
                            "transactional_id": meta.transactional_id if meta is not None else None,
                            "reasons": reasons})
    return sorted(out, key=lambda h: (h["topic"], h["partition"], h["start_offset"]))
