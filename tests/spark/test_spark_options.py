"""Options of Spark's Kafka integration that strom took on for parity: fetchOffset.numRetries and
fetchOffset.retryIntervalMs (driver-side lookups asked again, that many times, that far apart) and
the sink's includeHeaders."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from spark_helpers import consume_all, create_topic

from strom.spark import metadata
from strom.spark.options import OptionError, sink_options, source_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def opts(**kw: str) -> dict[str, str]:
    return {k.lower(): v for k, v in {**BOOT, "subscribe": "t", **kw}.items()}


def test_fetch_offset_retry_options_parse() -> None:
    o = source_options(opts(), streaming=True)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (3, 10)  # Spark's defaults
    o = source_options(opts(**{"fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "250"}), streaming=False)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (0, 250)
    for name, bad in (("fetchOffset.numRetries", "-1"), ("fetchOffset.retryIntervalMs", "soon")):
        with pytest.raises(OptionError, match=f"option '{name}': expected a non-negative integer"):
            source_options(opts(**{name: bad}), streaming=True)


class _FailingAdmin:
    """list_topics / list_offsets that fail `failures` times, then answer."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        from confluent_kafka import KafkaException

        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException("broker unreachable")

        class _Md:
            topics = {"t": type("T", (), {"error": None, "partitions": {0: None, 1: None}})()}
        return _Md()


@pytest.mark.parametrize("retries, interval_ms", [(0, 10), (2, 10), (5, 40)])
def test_fetch_offset_retries_take_effect(monkeypatch: pytest.MonkeyPatch, retries: int, interval_ms: int) -> None:
    sleeps: list[float] = []
    # The module's own view of the time module, not time.sleep itself: threads left by other tests
    # in this worker (a Spark session's) sleep too, and would land in the list.
    monkeypatch.setattr(metadata, "time", SimpleNamespace(sleep=sleeps.append, monotonic=time.monotonic))
    monkeypatch.setattr(metadata, "OFFSETS_TIMEOUT_S", 0.0)  # no failover patience beyond the retries
    o = source_options(opts(**{"fetchOffset.numRetries": str(retries), "fetchOffset.retryIntervalMs": str(interval_ms)}),
                       streaming=True)
    m = metadata.Metadata(o)

    # Fails once more than the retries allow: given up after 1 + retries attempts.
    m._admin = _FailingAdmin(retries + 1)  # type: ignore[assignment]
    with pytest.raises(metadata.OffsetLookupError, match="broker unreachable"):
        m.topics()
    assert m._admin.calls == retries + 1
    assert sleeps == [interval_ms / 1000] * retries

    # Fails as often as the retries allow: answered by the last one.
    sleeps.clear()
    m._admin = _FailingAdmin(retries)  # type: ignore[assignment]
    assert m.topics() == {"t": 2}
    assert sleeps == [interval_ms / 1000] * retries


def test_sink_include_headers_option(spark: Any, module_broker: Any) -> None:
    assert sink_options(opts()).include_headers is None
    assert sink_options(opts(includeHeaders="false")).include_headers is False
    b = module_broker.bootstrap
    create_topic(b, "hdr-out", 1)
    df = spark.createDataFrame([(f"v{i}", [("h", f"x{i}".encode())]) for i in range(4)],
                               "value string, headers array<struct<key:string,value:binary>>")

    def write(frame: Any, **options: str) -> None:
        frame.write.format("strom").mode("append").option("kafka.bootstrap.servers", b) \
            .option("topic", "hdr-out").options(**options).save()

    write(df)                                  # a headers column is written (Spark's behaviour) ...
    write(df, includeHeaders="true")           # ... and so it is when asked for ...
    write(df, includeHeaders="false")          # ... and left out when not
    got = sorted(consume_all(b, "hdr-out", 12), key=lambda m: m.offset())
    assert [len(m.headers() or ()) for m in got] == [1] * 8 + [0] * 4
    assert sorted(m.headers()[0] for m in got[:4]) == [("h", f"x{i}".encode()) for i in range(4)]
    with pytest.raises(Exception, match="'includeHeaders' is true but the DataFrame has no headers column"):
        write(df.select("value"), includeHeaders="true")
