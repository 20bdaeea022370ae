"""Shortcuts for the Spark tests: create topics, produce with delivery reports, consume everything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int  # Spark's: 0 CreateTime, 1 LogAppendTime
    headers: tuple[tuple[str, bytes | None], ...] | None


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)


def produce(bootstrap: str, records: list[dict[str, Any]], **conf: Any) -> list[Produced]:
    """Produce records (dicts of topic, value, and optional key, partition, timestamp, headers); returns
    what the broker acknowledged, with offsets and timestamps from the delivery reports."""
    from confluent_kafka import Producer

    out: list[Produced] = []
    errors: list[Any] = []

    def reporter(headers: Any) -> Any:
        def report(err: Any, msg: Any) -> None:  # delivery reports do not carry the headers: keep ours
            if err is not None:
                errors.append(err)
                return
            ts_type, ts = msg.timestamp()
            out.append(Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts, ts_type - 1,
                                tuple(headers) if headers else None))
        return report

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if r.get(k) is not None}
        producer.produce(r["topic"], value=r.get("value"), on_delivery=reporter(r.get("headers")), **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return out


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """Read `expected` records of `topic` from the beginning with a plain consumer."""
    import time
    import uuid

    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got
