"""The strom Spark source's pure parts: option parsing and offset-range planning (no Spark, no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from strom.spark.options import (
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OptionError,
    SpecificOffsets,
    SpecificTimestamps,
    partition_offsets_from_dict,
    partition_offsets_to_json,
    sink_options,
    source_options,
)
from strom.spark.planning import OffsetRange, rate_limit, split_ranges

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def opts(**kw: str) -> dict[str, str]:
    return {k.lower(): v for k, v in {**BOOT, **kw}.items()}


def test_defaults_follow_spark_kafka_source() -> None:
    stream = source_options(opts(subscribe="a,b"), streaming=True)
    assert stream.subscription.topics == ("a", "b")
    assert isinstance(stream.starting, LatestOffsets)
    assert stream.fail_on_data_loss is True and stream.include_headers is False
    batch = source_options(opts(subscribePattern="t.*"), streaming=False)
    assert isinstance(batch.starting, EarliestOffsets) and isinstance(batch.ending, LatestOffsets)
    assert batch.subscription.matches("topic") and not batch.subscription.matches("xt")
    assert source_options({"bootstrap.servers": "h:1", "assign": '{"a":[1,0]}'}, True).subscription.partitions == (
        ("a", 0), ("a", 1))


def test_offsets_json_and_timestamp_precedence() -> None:
    o = source_options(opts(subscribe="a", startingOffsets='{"a":{"0":23,"1":-2}}'), streaming=True)
    assert o.starting == SpecificOffsets({("a", 0): 23, ("a", 1): -2})
    o = source_options(opts(subscribe="a", startingOffsets="earliest", startingOffsetsByTimestamp='{"a":{"0":5}}'),
                       streaming=True)
    assert o.starting == SpecificTimestamps({("a", 0): 5})
    o = source_options(opts(subscribe="a", startingTimestamp="7", startingOffsetsByTimestamp='{"a":{"0":5}}'),
                       streaming=True)
    assert o.starting == GlobalTimestamp(7)
    raw = partition_offsets_to_json({("b", 10): 1, ("b", 2): 3, ("a", 0): 4})
    assert list(raw) == ["a", "b"] and list(raw["b"]) == ["2", "10"]
    assert partition_offsets_from_dict(raw) == {("b", 10): 1, ("b", 2): 3, ("a", 0): 4}


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "a"}, True, "bootstrap.servers"),
    (opts(), True, "exactly one of"),
    (opts(subscribe="a", assign='{"a":[0]}'), True, "exactly one of"),
    (opts(subscribe="a", startingOffsets="latest"), False, "latest is not valid for batch"),
    (opts(subscribe="a", endingOffsets='{"a":{"0":-2}}'), False, "earliest is not valid for batch"),
    (opts(subscribe="a", endingOffsets="latest"), True, "not valid in streaming"),
    (opts(subscribe="a", maxOffsetsPerTrigger="0"), True, "positive integer"),
    (opts(subscribe="a", startingOffsets="{bad"), True, "not valid JSON"),
    (opts(subscribe="a", failOnDataLoss="maybe"), True, "true or false"),
    (opts(subscribe="a", **{"kafka.auto.offset.reset": "earliest"}), True, "startingOffsets"),
    (opts(subscribePattern="("), True, "invalid regular expression"),
])
def test_bad_options_are_named(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        source_options({k.lower(): v for k, v in options.items()}, streaming=streaming)


def test_sink_options() -> None:
    assert sink_options(opts(topic="out")).topic == "out"
    assert sink_options(opts()).topic is None
    with pytest.raises(OptionError, match="bootstrap"):
        sink_options({"topic": "x"})


def test_rate_limit_is_proportional_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 2, ("t", 2): 198}
    # backlogs 900, 2, 98 of 1000; limit 100 -> shares 90, 0.2 (rounded up to 1), 9.8 -> 9
    assert rate_limit(100, start, latest) == {("t", 0): 90, ("t", 1): 1, ("t", 2): 109}
    assert rate_limit(10_000, start, latest) == latest
    assert rate_limit(5, latest, latest) == latest  # nothing to read


def test_split_ranges_min_partitions_and_max_records() -> None:
    big = OffsetRange("t", 0, 0, 1000)
    small = OffsetRange("t", 1, 0, 10)
    empty = OffsetRange("t", 2, 5, 5)
    assert split_ranges([big, small, empty]) == [big, small]
    pieces = split_ranges([big, small], min_partitions=5)
    assert [r for r in pieces if r.partition == 1] == [small]  # too small to split
    big_pieces = [r for r in pieces if r.partition == 0]
    assert len(big_pieces) == 4 and big_pieces[0].from_offset == 0 and big_pieces[-1].until_offset == 1000
    assert all(a.until_offset == b.from_offset for a, b in zip(big_pieces, big_pieces[1:], strict=False))
    capped = split_ranges([big], max_records_per_partition=300)
    assert [r.size for r in capped] == [250, 250, 250, 250]


# --------------------------------------------------------------------------------------------------
# The stream reader's offset decisions, with the broker replaced by a table of offsets


class FakeMetadata:
    def __init__(self, earliest: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]) -> None:
        self.earliest_offsets = earliest
        self.latest_offsets = latest

    def partitions(self, subscription: object) -> list[tuple[str, int]]:
        return sorted(self.latest_offsets)

    def earliest(self, tps: object) -> dict[tuple[str, int], int]:
        return {tp: self.earliest_offsets[tp] for tp in tps}  # type: ignore[attr-defined]

    def latest(self, tps: object) -> dict[tuple[str, int], int]:
        return {tp: self.latest_offsets[tp] for tp in tps}  # type: ignore[attr-defined]


def _stream_reader(meta: FakeMetadata, **kw: str) -> object:
    from strom.spark.source import StromStreamReader

    reader = StromStreamReader(source_options(opts(subscribePattern="t.*", **kw), streaming=True))
    reader._metadata = meta  # type: ignore[assignment]
    return reader


def test_stream_reader_admission_control_and_available_now() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    meta = FakeMetadata({("t", 0): 0, ("t", 1): 0, ("u", 0): 5}, {("t", 0): 100, ("t", 1): 300, ("u", 0): 5})
    r: Any = _stream_reader(meta, maxOffsetsPerTrigger="40")
    assert r.getDefaultReadLimit() == ReadMaxRows(40)
    start = {"t": {"0": 0, "1": 0}}
    # u-0 is new: it begins at its earliest offset (5) and has nothing to read
    assert r.latestOffset(start, ReadMaxRows(40)) == {"t": {"0": 10, "1": 30}, "u": {"0": 5}}
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}, "u": {"0": 5}}
    r.prepareForTriggerAvailableNow()
    meta.latest_offsets = {("t", 0): 500, ("t", 1): 500, ("u", 0): 9}  # arrives after the trigger started
    assert r.latestOffset({"t": {"0": 100, "1": 300}, "u": {"0": 5}}, ReadMaxRows(40)) == {
        "t": {"0": 100, "1": 300}, "u": {"0": 5}}  # nothing beyond the target: the query ends


def test_stream_reader_min_offsets_per_trigger_waits() -> None:
    meta = FakeMetadata({("t", 0): 0}, {("t", 0): 10})
    r: Any = _stream_reader(meta, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    from pyspark.sql.streaming.datasource import ReadMinRows

    assert r.getDefaultReadLimit() == ReadMinRows(50)
    assert r.latestOffset({"t": {"0": 0}}, ReadMinRows(50)) == {"t": {"0": 0}}  # 10 < 50: wait
    meta.latest_offsets = {("t", 0): 60}
    assert r.latestOffset({"t": {"0": 0}}, ReadMinRows(50)) == {"t": {"0": 60}}


def test_stream_reader_plans_ranges_and_reports_data_loss() -> None:
    from strom.spark import DataLossError

    meta = FakeMetadata({("t", 0): 0, ("t", 1): 7}, {("t", 0): 1000, ("t", 1): 20})
    r: Any = _stream_reader(meta, minPartitions="4")
    parts = r.partitions({"t": {"0": 0}}, {"t": {"0": 1000}})
    assert [(p.range.from_offset, p.range.until_offset) for p in parts] == [(0, 250), (250, 500), (500, 750),
                                                                             (750, 1000)]
    with pytest.raises(DataLossError, match="t-1 starts from 7 instead of 0"):
        r.partitions({"t": {"0": 0}}, {"t": {"0": 10, "1": 20}})
    with pytest.raises(DataLossError, match="Partitions t-1 are gone"):
        r.partitions({"t": {"0": 0, "1": 3}}, {"t": {"0": 10}})
    lenient: Any = _stream_reader(meta, failOnDataLoss="false")
    parts = lenient.partitions({"t": {"0": 0}}, {"t": {"0": 10, "1": 20}})
    assert [(p.range.partition, p.range.from_offset, p.range.until_offset) for p in parts] == [(0, 0, 10), (1, 7, 20)]


def test_reader_pauses_the_garbage_collector_only_while_it_runs() -> None:
    import gc
    from collections.abc import Iterator

    from strom.spark.fetch import _gc_paused

    seen: list[bool] = []

    def steps() -> Iterator[int]:
        for i in range(3):
            seen.append(gc.isenabled())
            yield i

    assert gc.isenabled()
    it = _gc_paused(steps())
    assert next(it) == 0
    assert gc.isenabled()  # the caller runs with the collector on
    assert next(it) == 1
    del it  # a reader abandoned half-way leaves nothing switched off
    assert gc.isenabled()
    assert seen == [False, False]
    assert list(_gc_paused(steps())) == [0, 1, 2]
    assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        assert list(_gc_paused(steps())) == [0, 1, 2]
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_executor_consumer_queue_fits_the_range() -> None:
    from strom.spark.fetch import consumer_config

    o = source_options(opts(subscribe="t"), streaming=False)
    depth = {n: consumer_config(o, n)["queued.min.messages"] for n in (10, 50_000, 5_000_000)}
    assert depth == {10: 1_000, 50_000: 50_000, 5_000_000: 1_000_000}
    assert consumer_config(o, 10)["fetch.queue.backoff.ms"] == 10
    mine = source_options(opts(subscribe="t", **{"kafka.queued.min.messages": "123"}), streaming=False)
    assert consumer_config(mine, 50_000)["queued.min.messages"] == "123"  # a kafka.* option wins
