"""Prometheus metrics of one broker, computed at scrape time.

The request path only bumps plain counters (strom.broker.metrics); state gauges (log sizes and
offsets, connections, groups, lag) are read off the broker when Prometheus asks. Each broker has its
own CollectorRegistry, never prometheus_client's global one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from strom import __version__
from strom.admin import snapshot
from strom.broker.metrics import LATENCY_BUCKETS
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.admin.view import BrokerView

_BUCKET_LABELS = [repr(b) for b in LATENCY_BUCKETS] + ["+Inf"]


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


class BrokerCollector:
    """A prometheus_client custom collector over one broker's BrokerView."""

    def __init__(self, view: BrokerView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        m = view.metrics
        ready, _ = snapshot.is_ready(view)
        names = snapshot.api_names(view)

        info = GaugeMetricFamily("strom_broker_info", "Broker identity (value is always 1).",
                                 labels=["broker_id", "cluster_id", "version"])
        info.add_metric([str(view.config.broker_id), str(view.metadata.cluster_id), __version__], 1)
        yield info
        yield GaugeMetricFamily("strom_broker_ready", "1 once logs are loaded and the Kafka listeners serve.",
                                value=1 if ready else 0)
        yield GaugeMetricFamily("strom_broker_start_time_seconds", "When the broker started (Unix time).",
                                value=m.start_time)
        yield GaugeMetricFamily("strom_connections", "Open Kafka client connections.", value=view.connection_count())

        # --- requests
        requests = CounterMetricFamily("strom_requests", "Kafka requests handled, by API.", labels=["api"])
        latency = HistogramMetricFamily("strom_request_duration_seconds",
                                        "Time from handler start to response, by API (Fetch includes long-poll).",
                                        labels=["api"])
        for key, stats in sorted(m.requests.items()):
            api = names.get(key, str(key))
            requests.add_metric([api], stats.count)
            cumulative = 0
            buckets = []
            for label, n in zip(_BUCKET_LABELS, stats.buckets, strict=True):
                cumulative += n
                buckets.append((label, cumulative))
            latency.add_metric([api], buckets, stats.seconds)
        yield requests
        yield latency
        errors = CounterMetricFamily("strom_request_errors",
                                     "Partition-level errors in Produce and Fetch responses, by API and error.",
                                     labels=["api", "error", "code"])
        for (key, code), n in sorted(m.errors.items()):
            errors.add_metric([names.get(key, str(key)), error_name(code), str(code)], n)
        yield errors
        yield CounterMetricFamily("strom_fetch_answers_reused",
                                  "Sessionless Fetch responses sent as encoded for the connection's previous "
                                  "identical request, nothing having changed in their partitions since.",
                                  value=m.fetch_answers_reused)

        if not ready:  # logs may still be loading in a thread: nothing below is safe to read yet
            return
        topics = view.metadata.topics()
        m.forget_topics(topics)

        # --- per-topic throughput
        fams = {
            "bytes_in": CounterMetricFamily("strom_topic_bytes_in", "Record batch bytes appended, by topic.",
                                            labels=["topic"]),
            "records_in": CounterMetricFamily("strom_topic_records_in", "Records appended, by topic.",
                                              labels=["topic"]),
            "bytes_out": CounterMetricFamily("strom_topic_bytes_out", "Record batch bytes sent to fetchers, by topic.",
                                             labels=["topic"]),
            "records_out": CounterMetricFamily("strom_topic_records_out",
                                               "Records in whole batches sent to fetchers, by topic.",
                                               labels=["topic"]),
        }
        for name, topic_stats in sorted(m.topics.items()):
            for attr, fam in fams.items():
                fam.add_metric([name], getattr(topic_stats, attr))
        yield from fams.values()

        # --- topics and partition logs
        yield GaugeMetricFamily("strom_topics", "Topics (internal ones included).", value=len(topics))
        yield GaugeMetricFamily("strom_partitions", "Partitions of all topics.",
                                value=sum(t.partitions for t in topics.values()))
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("strom_log_size_bytes", "Bytes of a partition's log segments.", labels=labels)
        start = GaugeMetricFamily("strom_log_start_offset", "First offset of a partition's log.", labels=labels)
        end = GaugeMetricFamily("strom_log_end_offset", "Offset the next appended record will get.", labels=labels)
        hw = GaugeMetricFamily("strom_high_watermark", "Offset up to which records are visible.", labels=labels)
        lso = GaugeMetricFamily("strom_last_stable_offset",
                                "Offset up to which read_committed consumers read (first open transaction).",
                                labels=labels)
        for plog in sorted(view.log_manager.all_logs(), key=lambda p: (p.topic, p.partition)):
            lv = [plog.topic, str(plog.partition)]
            size.add_metric(lv, plog.size_bytes())
            start.add_metric(lv, plog.log_start_offset)
            end.add_metric(lv, plog.log_end_offset)
            hw.add_metric(lv, plog.high_watermark)
            lso.add_metric(lv, plog.last_stable_offset)
        yield from (size, start, end, hw, lso)

        # --- replication and the controller
        yield from self._replication()

        # --- consumer groups
        yield from self._groups()

        # --- transactions this broker coordinates
        yield from self._transactions()

    def _transactions(self) -> Iterator[Metric]:
        coord = self.view.txn_coordinator()
        if coord is None:
            return
        yield CounterMetricFamily("strom_transactions_committed", "Transactions this coordinator committed.",
                                  value=coord.commits)
        yield CounterMetricFamily("strom_transactions_aborted", "Transactions this coordinator aborted.",
                                  value=coord.aborts)
        yield CounterMetricFamily("strom_transactions_timed_out",
                                  "Transactions aborted by this coordinator because they ran past their timeout.",
                                  value=coord.timeouts)
        yield CounterMetricFamily("strom_transactional_ids_expired",
                                  "Transactional ids removed after transactional.id.expiration.ms at rest.",
                                  value=coord.expired)
        states = GaugeMetricFamily("strom_transactional_ids", "Transactional ids known to this coordinator, by state.",
                                   labels=["state"])
        counts: dict[str, int] = {}
        for meta in coord.shard.txns.values():
            counts[meta.state.display] = counts.get(meta.state.display, 0) + 1
        for state, n in sorted(counts.items()):
            states.add_metric([state], n)
        yield states

    def _replication(self) -> Iterator[Metric]:
        """Kafka's replica manager and controller gauges, named after their MBeans so dashboards and
        alerts written for Kafka translate one to one. A single broker is its own controller and leads
        every partition with an ISR of itself: nothing is under-replicated or offline there."""
        view = self.view
        lag = GaugeMetricFamily("strom_fetcher_lag",
                                "On a partition's leader: its log end offset minus each follower's "
                                "(kafka.server FetcherLagMetrics ConsumerLag, seen from the leader).",
                                labels=["topic", "partition", "replica"])
        state = view.replication()
        partitions, leaders, under = state.partitions, state.leaders, state.under_replicated
        shrinks, expands = state.isr_shrinks, state.isr_expands
        active = 1 if state.active_controller else 0
        # Like Kafka, only the active controller counts offline partitions; the others say 0.
        offline = snapshot.offline_partition_count(view) if active else 0
        for topic, partition, replica, behind in state.follower_lags:
            lag.add_metric([topic, str(partition), str(replica)], behind)
        yield GaugeMetricFamily("strom_replica_manager_under_replicated_partitions",
                                "Partitions led here whose ISR is smaller than their replica set "
                                "(kafka.server ReplicaManager UnderReplicatedPartitions).", value=under)
        yield GaugeMetricFamily("strom_replica_manager_partition_count",
                                "Partitions with a replica on this broker "
                                "(kafka.server ReplicaManager PartitionCount).", value=partitions)
        yield GaugeMetricFamily("strom_replica_manager_leader_count",
                                "Partitions this broker leads (kafka.server ReplicaManager LeaderCount).",
                                value=leaders)
        yield CounterMetricFamily("strom_replica_manager_isr_shrinks",
                                  "ISR shrinks made by this broker as leader "
                                  "(kafka.server ReplicaManager IsrShrinksPerSec).", value=shrinks)
        yield CounterMetricFamily("strom_replica_manager_isr_expands",
                                  "ISR expansions made by this broker as leader "
                                  "(kafka.server ReplicaManager IsrExpandsPerSec).", value=expands)
        yield GaugeMetricFamily("strom_controller_active_controller_count",
                                "1 on the active controller, 0 on every other broker "
                                "(kafka.controller KafkaController ActiveControllerCount).", value=active)
        yield GaugeMetricFamily("strom_controller_offline_partitions_count",
                                "Partitions without a live leader, reported by the active controller only "
                                "(kafka.controller KafkaController OfflinePartitionsCount).", value=offline)
        yield lag

    def _groups(self) -> Iterator[Metric]:
        view = self.view
        groups = snapshot.list_groups(view)
        by_state: dict[str, int] = {}
        for g in groups:
            by_state[g.state] = by_state.get(g.state, 0) + 1
        count = GaugeMetricFamily("strom_consumer_groups", "Consumer groups, by state.", labels=["state"])
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable"):
            by_state.setdefault(state, 0)
        for state, n in sorted(by_state.items()):
            count.add_metric([state], n)
        yield count
        members = GaugeMetricFamily("strom_consumer_group_members", "Members of a consumer group.",
                                    labels=["group"])
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily("strom_consumer_group_committed_offset", "A group's committed offset.",
                                      labels=labels)
        lag = GaugeMetricFamily("strom_consumer_group_lag",
                                "High watermark minus the group's committed offset.", labels=labels)
        coordinator = view.group_coordinator()
        for g in groups:
            assert coordinator is not None  # the groups come from the loaded coordinator
            if g.group_type == "share":
                count_members = len(coordinator.describe_share_group(g.group_id).members)
            elif g.group_type == "consumer":
                count_members = len(coordinator.describe_consumer_group(g.group_id).members)
            else:
                count_members = len(coordinator.describe_group(g.group_id).members)
            members.add_metric([g.group_id], count_members)
            for o in snapshot.group_offsets(view, g.group_id):
                lv = [g.group_id, o["topic"], str(o["partition"])]
                committed.add_metric(lv, o["committed"])
                if o["lag"] is not None:
                    lag.add_metric(lv, o["lag"])
        yield from (members, committed, lag)


def make_registry(view: BrokerView) -> CollectorRegistry:
    """A registry of its own for one broker: the broker's metrics plus process and Python ones."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(view))  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
