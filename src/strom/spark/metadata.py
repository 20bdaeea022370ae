"""Driver-side questions to the broker: which partitions a subscription covers, and their offsets.

Uses confluent-kafka's AdminClient: one Metadata request lists the topics, and one batched
ListOffsets request per broker answers earliest / latest / by-timestamp for many partitions at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from strom.spark.options import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OffsetSpec,
    OptionError,
    PartitionOffsets,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    TopicPartition,
)

log = logging.getLogger("strom.spark")

REQUEST_TIMEOUT_S = 30.0
# After the retries the options ask for, a failed lookup is still asked again (with a growing pause)
# until this long after its first attempt: enough for a leader failover in a cluster.
OFFSETS_TIMEOUT_S = 30.0


class OffsetLookupError(RuntimeError):
    """The broker could not answer an offset or metadata question."""


class Metadata:
    def __init__(self, options: SourceOptions) -> None:
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import AdminClient

        conf: dict[str, Any] = dict(options.client.client_config())
        conf.pop("isolation.level", None)
        self._admin = AdminClient(conf)
        self._isolation = (IsolationLevel.READ_COMMITTED if options.isolation_level == "read_committed"
                           else IsolationLevel.READ_UNCOMMITTED)
        self._retries = options.fetch_offset_retries
        self._retry_interval_s = options.fetch_offset_retry_interval_ms / 1000

    def _again(self, attempt: int, deadline: float) -> bool:
        """After failed attempt number `attempt` (from 1): wait and say whether to ask again.

        The first fetchOffset.numRetries retries come fetchOffset.retryIntervalMs apart (Spark's
        rule); later ones, until `deadline`, with a pause growing to 1 s.
        """
        if attempt <= self._retries:
            time.sleep(self._retry_interval_s)
            return True
        if time.monotonic() < deadline:
            time.sleep(min(0.2 * attempt, 1.0))
            return True
        return False

    # ---------------------------------------------------------------------------------------------
    def topics(self) -> dict[str, int]:
        """Topic -> partition count, internal topics (names starting with "__") left out."""
        last: Exception | None = None
        deadline = time.monotonic() + OFFSETS_TIMEOUT_S
        attempt = 0
        while True:
            attempt += 1
            try:
                md = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
            except Exception as e:  # KafkaException: broker unreachable or timed out
                last = e
                if self._again(attempt, deadline):
                    continue
                break
            out: dict[str, int] = {}
            retry = False
            for name, t in md.topics.items():
                if name.startswith("__"):
                    continue
                if t.error is not None:
                    if t.error.retriable():
                        retry = True
                    continue
                out[name] = len(t.partitions)
            if not retry:
                return out
            last = OffsetLookupError("topic metadata not yet available")
            if not self._again(attempt, deadline):
                break
        raise OffsetLookupError(f"could not list topics: {last}")

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions a subscription covers now (new topics and partitions included as they appear)."""
        topics = self.topics()
        if subscription.kind == "assign":
            return [tp for tp in subscription.partitions if tp[0] in topics and tp[1] < topics[tp[0]]]
        return sorted((t, p) for t, n in topics.items() if subscription.matches(t) for p in range(n))

    # ---------------------------------------------------------------------------------------------
    def _list_offsets(self, specs: Mapping[TopicPartition, Any], *, negative_ok: bool = False) -> dict[TopicPartition, int]:
        """ListOffsets with retries. An earliest or latest offset is never negative: librdkafka
        reports -1001 (no offset) while a partition's leadership moves, and that is asked again."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KTP

        from strom.spark.fetch import transient_codes

        transient = transient_codes()  # a leadership moving: asked again, not a failure
        remaining = dict(specs)
        out: dict[TopicPartition, int] = {}
        last: Exception | None = None
        # Patient enough for a leader failover (a ZooKeeper session timeout and an election).
        deadline = time.monotonic() + OFFSETS_TIMEOUT_S
        attempt = 0
        while remaining:
            attempt += 1
            try:
                futures = self._admin.list_offsets({KTP(t, p): spec for (t, p), spec in remaining.items()},
                                                   isolation_level=self._isolation,
                                                   request_timeout=REQUEST_TIMEOUT_S)
            except KafkaException as e:
                last = e
                if self._again(attempt, deadline):
                    continue
                break
            for ktp, fut in futures.items():
                try:
                    info = fut.result()
                except KafkaException as e:
                    last = e
                    err = e.args[0] if e.args else None
                    if err is not None and hasattr(err, "retriable") and not err.retriable() \
                            and err.code() not in transient:
                        raise OffsetLookupError(f"offsets of {ktp.topic}-{ktp.partition}: {err}") from None
                    continue
                tp = (ktp.topic, ktp.partition)
                if int(info.offset) < 0 and not negative_ok:
                    last = OffsetLookupError(f"{ktp.topic}-{ktp.partition}: no offset ({info.offset}) yet")
                    continue
                out[tp] = int(info.offset)
                remaining.pop(tp, None)
            if remaining:
                if not self._again(attempt, deadline):
                    break
                # librdkafka looks leaders up in its metadata cache, which a failover leaves stale
                # (for topic.metadata.refresh.interval.ms): a metadata request renews it.
                for topic in {t for t, _ in remaining}:
                    with contextlib.suppress(KafkaException):
                        self._admin.list_topics(topic, timeout=5)
        if remaining:
            names = ", ".join(f"{t}-{p}" for t, p in sorted(remaining))
            raise OffsetLookupError(f"could not list offsets of {names}: {last}")
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec as KOffsetSpec

        return self._list_offsets({tp: KOffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec as KOffsetSpec

        return self._list_offsets({tp: KOffsetSpec.latest() for tp in tps})

    def for_timestamps(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The first offset whose timestamp is >= the given one (ms); -1 where there is none."""
        from confluent_kafka.admin import OffsetSpec as KOffsetSpec

        return self._list_offsets({tp: KOffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()},
                                  negative_ok=True)

    # ---------------------------------------------------------------------------------------------
    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], *, option: str,
                no_match: str = "latest") -> PartitionOffsets:
        """Concrete offsets for `tps` from a starting/ending offset spec.

        `no_match` says what a timestamp with no record at or after it becomes: "latest", or "error".
        """
        if not tps:
            return {}
        if isinstance(spec, EarliestOffsets):
            return self.earliest(tps)
        if isinstance(spec, LatestOffsets):
            return self.latest(tps)
        if isinstance(spec, SpecificOffsets):
            _check_covers(spec.offsets, tps, option)
            out = {tp: spec.offsets[tp] for tp in tps}
            early = [tp for tp, o in out.items() if o == EARLIEST]
            late = [tp for tp, o in out.items() if o == LATEST]
            out.update(self.earliest(early))
            out.update(self.latest(late))
            return out
        if isinstance(spec, GlobalTimestamp):
            stamps = {tp: spec.timestamp_ms for tp in tps}
        else:
            assert isinstance(spec, SpecificTimestamps)
            _check_covers(spec.timestamps, tps, option)
            stamps = {tp: spec.timestamps[tp] for tp in tps}
        found = self.for_timestamps(stamps)
        missing = [tp for tp in tps if found.get(tp, -1) < 0]
        if missing and no_match == "error":
            names = ", ".join(f"{t}-{p} (timestamp {stamps[(t, p)]})" for t, p in missing)
            raise OptionError(
                f"option '{option}': no record at or after the given timestamp in {names}; set the option "
                "'startingOffsetsByTimestampStrategy' to 'latest' to start from the latest offset instead")
        if missing:
            found.update(self.latest(missing))
        return {tp: found[tp] for tp in tps}


def _check_covers(given: Mapping[TopicPartition, int], tps: list[TopicPartition], option: str) -> None:
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not existing or not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OptionError(
            f"option '{option}': per-partition values must name every partition of the subscribed topics "
            f"(use -2 for earliest, -1 for latest): {'; '.join(parts)}")
