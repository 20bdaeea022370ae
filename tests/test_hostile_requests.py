"""Every API the broker serves, sent with hostile field values: huge counts, negative and extreme ids,
replica ids, the internal topics' names, names Kafka refuses, a decompression bomb for records.
Whatever comes, the broker answers or closes that connection (or, for a request that may wait, such
as a long-poll fetch, keeps it pending) and goes on serving everyone else: a bystander's requests
are answered after every one, the broker stays within its memory, and a client producing and
consuming beside the whole run loses nothing.

The values come from a seeded random generator walking kio's request classes, so a failure names
the API, version and example that caused it, and the run is the same every time.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import types
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import cramjam
import pytest
from brokerproc import BrokerProcess
from helpers import BackgroundTraffic, ConnectionClosed, RawConnection, wait_until

from strom.protocol import wire
from strom.records import codec

pytestmark = pytest.mark.timeout(600)

EXAMPLES_PER_VERSION = 3
RSS_LIMIT = 400 << 20
BIG_COUNT = 2000  # elements of a top-level array: "huge counts" (a frame stays within the request cap)
NAMES = ("__consumer_offsets", "__transaction_state", "bad\nname", "x" * 249, "", "hostile", "..")
INTS = (-1, 0, 1, 7, -(2**31), 2**31 - 1, -(2**63), 2**63 - 1, 32767, -32768, 127, 255)
# The APIs a broker answers only to other brokers or that change the cluster for everyone are
# included: the point is that nothing a client sends harms the broker.


def _bomb() -> bytes:
    """One record batch whose zstd payload holds 64 MiB of zeros in a few KB."""
    value = b"\0" * (64 << 20)
    batch = bytearray(codec.build_batch([(None, b"")], timestamp_ms=1))
    compressed = bytes(cramjam.zstd.compress(value))
    # Swap the records section for the compressed blob and mark the batch zstd; the CRC is left as
    # it was (wrong): the broker must not inflate the records to find that out either.
    header = bytearray(batch[:61])
    struct.pack_into(">h", header, 21, 4)  # attributes: compression zstd
    body = header + compressed
    struct.pack_into(">i", body, 8, len(body) - 12)  # batch length
    return bytes(body)


BOMB = _bomb()


class Hostile:
    """Builds a request of a kio class with hostile values, from a seeded random generator."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def value(self, hint: Any, depth: int) -> Any:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            options = typing.get_args(hint)
            if type(None) in options and self.rng.random() < 0.25:
                return None
            return self.value(self.rng.choice([o for o in options if o is not type(None)]), depth)
        if origin is tuple:
            (inner, *_) = typing.get_args(hint)
            count = self.rng.choice((0, 1, 3, BIG_COUNT) if depth == 0 else (0, 1, 3))
            if count == 0:
                return ()
            element = self.value(inner, depth + 1)
            return tuple(element for _ in range(count))
        if dataclasses.is_dataclass(hint):
            return self.entity(hint, depth)
        return self.scalar(hint)

    def entity(self, cls: Any, depth: int = 0) -> Any:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: self.value(hints[f.name], depth) for f in dataclasses.fields(cls) if f.init})

    def scalar(self, hint: Any) -> Any:
        from kio.static.primitive import Records, i32Timedelta, i64Timedelta

        if hint is bool:
            return self.rng.choice((True, False))
        if hint is uuid.UUID:
            return self.rng.choice((uuid.UUID(int=0), uuid.UUID(int=self.rng.getrandbits(128))))
        if isinstance(hint, type) and issubclass(hint, (i32Timedelta, i64Timedelta)) or hint is datetime.timedelta:
            ms = [m for m in (0, 1, 2**31 - 1) if isinstance(datetime.timedelta(milliseconds=m), hint)]
            return datetime.timedelta(milliseconds=self.rng.choice(ms or [0]))
        if hint is datetime.datetime:
            return datetime.datetime.fromtimestamp(0, datetime.UTC)
        if isinstance(hint, type) and issubclass(hint, float):
            return hint(self.rng.choice((0.0, 1e308, -1.0)))
        if hint is Records or hint is bytes:
            return self.rng.choice((BOMB, b"\xff" * 64, b""))
        if isinstance(hint, type) and issubclass(hint, int):
            fits = [v for v in INTS if isinstance(v, hint)]
            return hint(self.rng.choice(fits or [0]))
        if isinstance(hint, type) and issubclass(hint, str) or hint is str:
            fits = [v for v in NAMES if isinstance(v, hint)]
            return hint(self.rng.choice(fits or ["hostile"]))
        raise TypeError(f"no hostile value for {hint!r}")


def _apis(bootstrap: str) -> list[tuple[int, int, int]]:
    with RawConnection(bootstrap) as c:
        return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in c.api_versions().api_keys]


def _cases(bootstrap: str) -> Iterator[tuple[int, int, int]]:
    for api_key, low, high in _apis(bootstrap):
        if api_key in (17, 36):  # SaslHandshake/SaslAuthenticate on a PLAINTEXT listener: refused at once
            continue
        for version in sorted({low, high}):
            for example in range(EXAMPLES_PER_VERSION):
                yield api_key, version, example


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BackgroundTraffic]]:
    b = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data", overrides={"num.partitions": "2"})
    traffic: BackgroundTraffic | None = None
    try:
        b.start()
        with RawConnection(b.bootstrap) as c:
            assert int(c.create_topic("steady", 1).error_code) == 0
            assert int(c.create_topic("hostile", 2).error_code) == 0
        traffic = BackgroundTraffic(b.bootstrap, "steady").start()
        wait_until(lambda: len(traffic.consumed) >= 5, 30, what="background traffic flowing")
        yield b, traffic
    finally:
        if traffic is not None:
            traffic.finish(5)
        b.stop()


def _send(bootstrap: str, frame: bytes) -> str:
    """Send one request on a fresh connection: 'answered', 'closed' or 'pending' (after a while)."""
    with RawConnection(bootstrap, timeout=3) as c:
        try:
            c.send_bytes(frame)
            c.read_frame()
            return "answered"
        except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
            return "closed"
        except TimeoutError:
            return "pending"


def test_hostile_field_values_in_every_api(target: tuple[BrokerProcess, BackgroundTraffic]) -> None:
    broker, _ = target
    outcomes: dict[str, int] = {}
    sent = 0
    for api_key, version, example in _cases(broker.bootstrap):
        where = f"api {api_key} v{version} example {example}"
        cls = wire.request_class(api_key, version)
        body = Hostile(where).entity(cls)
        frame = wire.encode_request(api_key, version, 1, "hostile", body)
        if len(frame) > 50 << 20:  # past the request cap there is nothing to learn about fields
            continue
        outcome = _send(broker.bootstrap, frame)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        sent += 1
        assert broker.alive(), f"broker died after {where}:\n" + broker.log_text()[-3000:]
        with RawConnection(broker.bootstrap, timeout=10) as bystander:
            assert int(bystander.api_versions().error_code) == 0, where
        assert broker.rss_bytes() < RSS_LIMIT, f"RSS {broker.rss_bytes() >> 20} MiB after {where}"
    print(f"{sent} hostile requests: {outcomes}")
    assert sent >= 100, outcomes
    assert outcomes.get("answered", 0) > sent // 2, outcomes  # most are answered, with errors


def test_the_bystander_client_lost_nothing(target: tuple[BrokerProcess, BackgroundTraffic]) -> None:
    broker, traffic = target
    acked, consumed, errors = traffic.finish(30)
    assert not errors, errors[:5]
    assert len(acked) >= 5
    assert consumed == acked, f"consumed {len(consumed)} of {len(acked)} acknowledged records"
    assert broker.alive()
