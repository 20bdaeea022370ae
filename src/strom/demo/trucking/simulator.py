"""Truck geo-location events: a seeded simulator, and a producer that plays it in (accelerated) real time.

Each event is one Avro record (EVENT_SCHEMA), written by confluent-kafka's AvroSerializer against a
schema registry, keyed by truck id:

    {"truckId": 12, "driverId": 23, "driverName": "Nadia Okafor", "routeId": 3,
     "route": "Memphis to Little Rock", "eventType": "Overspeed", "latitude": 35.1, "longitude": -90.7,
     "speed": 87, "eventTime": 1795334403718}

eventTime is in milliseconds since the epoch. Events leave slightly out of order (a few seconds at
most), as real devices deliver them.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.demo.trucking import EVENTS_SUBJECT

EVENT_TYPES = ("Normal", "Overspeed", "Lane Departure", "Unsafe following distance")

EVENT_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "TruckGeoEvent", "namespace": "strom.demo.trucking",
    "doc": "A truck's position and what its driver did, as the truck reported it.",
    "fields": [
        {"name": "truckId", "type": "int"},
        {"name": "driverId", "type": "int"},
        {"name": "driverName", "type": "string"},
        {"name": "routeId", "type": "int"},
        {"name": "route", "type": "string"},
        {"name": "eventType", "type": "string", "doc": "Normal, Overspeed, Lane Departure, Unsafe following distance"},
        {"name": "latitude", "type": "double"},
        {"name": "longitude", "type": "double"},
        {"name": "speed", "type": "int"},
        {"name": "eventTime", "type": "long", "doc": "milliseconds since the epoch"},
    ],
}

DRIVERS = (
    (11, "Ada Whitfield"), (12, "Bram Kovacs"), (13, "Carmen Ruiz"), (14, "Dmitri Sokolov"),
    (15, "Efua Mensah"), (16, "Finn Larsen"), (17, "Grace Tanaka"), (18, "Hugo Moreau"),
    (19, "Ines Duarte"), (20, "Jonas Weber"), (21, "Kiri Walker"), (22, "Leila Haddad"),
)

# (id, name, start (lat, lon), end (lat, lon))
ROUTES = (
    (1, "Saint Louis to Tulsa", (38.627, -90.199), (36.154, -95.993)),
    (2, "Saint Louis to Chicago", (38.627, -90.199), (41.878, -87.630)),
    (3, "Memphis to Little Rock", (35.149, -90.049), (34.746, -92.290)),
    (4, "Des Moines to Kansas City", (41.587, -93.625), (39.100, -94.579)),
    (5, "Joplin to Kansas City", (37.084, -94.513), (39.100, -94.579)),
    (6, "Springfield to Kansas City", (37.209, -93.292), (39.100, -94.579)),
)


@dataclass
class Truck:
    truck_id: int
    driver_id: int
    driver_name: str
    route_id: int
    route: str
    start: tuple[float, float]
    end: tuple[float, float]
    risk: float          # probability that an event is a violation
    progress: float      # 0..1 along the route
    direction: int       # +1 outbound, -1 back


class Simulator:
    """A deterministic stream of truck events for a given seed.

    `start_ms` is the first event time; the clock advances `mean_gap_ms` per event on average.
    A third of the drivers (at least one) drive riskily.
    """

    def __init__(self, seed: int = 1, trucks: int = 8, start_ms: int | None = None, mean_gap_ms: float = 250.0,
                 max_lateness_ms: int = 3000) -> None:
        if not 1 <= trucks <= len(DRIVERS):
            raise ValueError(f"trucks must be between 1 and {len(DRIVERS)}")
        self.rng = random.Random(seed)
        self.clock_ms = int(time.time() * 1000) if start_ms is None else start_ms
        self.start_ms = self.clock_ms
        self.mean_gap_ms = mean_gap_ms
        self.max_lateness_ms = max_lateness_ms
        risky = set(self.rng.sample(range(trucks), max(1, trucks // 3)))
        self.trucks = []
        for i in range(trucks):
            driver_id, driver_name = DRIVERS[i]
            route_id, route, start, end = ROUTES[i % len(ROUTES)]
            self.trucks.append(Truck(
                truck_id=100 + i, driver_id=driver_id, driver_name=driver_name, route_id=route_id, route=route,
                start=start, end=end, risk=0.22 if i in risky else 0.03,
                progress=self.rng.random(), direction=1))

    def next_event(self) -> dict[str, Any]:
        rng = self.rng
        self.clock_ms += max(1, int(rng.expovariate(1.0 / self.mean_gap_ms)))
        truck = rng.choice(self.trucks)
        event_type = rng.choice(EVENT_TYPES[1:]) if rng.random() < truck.risk else EVENT_TYPES[0]
        speed = rng.randint(82, 105) if event_type == "Overspeed" else rng.randint(40, 74)
        truck.progress += truck.direction * rng.uniform(0.001, 0.004)
        if not 0.0 <= truck.progress <= 1.0:
            truck.direction = -truck.direction
            truck.progress = min(1.0, max(0.0, truck.progress))
        lat = truck.start[0] + (truck.end[0] - truck.start[0]) * truck.progress
        lon = truck.start[1] + (truck.end[1] - truck.start[1]) * truck.progress
        lateness = rng.randint(0, self.max_lateness_ms)
        return {
            "truckId": truck.truck_id,
            "driverId": truck.driver_id,
            "driverName": truck.driver_name,
            "routeId": truck.route_id,
            "route": truck.route,
            "eventType": event_type,
            "latitude": round(lat, 5),
            "longitude": round(lon, 5),
            "speed": speed,
            "eventTime": max(self.start_ms, self.clock_ms - lateness),
        }

    def events(self, n: int) -> list[dict[str, Any]]:
        return [self.next_event() for _ in range(n)]


def registry_client(registry_url: str, registry_config: Mapping[str, str] | None = None) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({**dict(registry_config or {}), "url": registry_url})


def register_event_schema(registry_url: str, registry_config: Mapping[str, str] | None = None,
                          subject: str = EVENTS_SUBJECT) -> int:
    """Register EVENT_SCHEMA under the events' subject (a no-op when it is there): its id."""
    from confluent_kafka.schema_registry import Schema

    return int(registry_client(registry_url, registry_config).register_schema(
        subject, Schema(json.dumps(EVENT_SCHEMA), "AVRO")))


class Encoder:
    """(key, value) of an event's record: keyed by truck, so one truck's events stay in order; the
    value in Avro, Confluent-framed, by confluent-kafka's AvroSerializer."""

    def __init__(self, topic: str, registry_url: str, registry_config: Mapping[str, str] | None = None) -> None:
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.serialize = AvroSerializer(registry_client(registry_url, registry_config), json.dumps(EVENT_SCHEMA))
        self.context = SerializationContext(topic, MessageField.VALUE)

    def __call__(self, event: dict[str, Any]) -> tuple[bytes, bytes]:
        value = self.serialize(event, self.context)
        assert value is not None
        return str(event["truckId"]).encode(), value


def produce_events(bootstrap: str, topic: str, events: list[dict[str, Any]], registry_url: str) -> None:
    from confluent_kafka import Producer

    encode = Encoder(topic, registry_url)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for e in events:
        key, value = encode(e)
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(30):
        raise RuntimeError(f"events not acknowledged by {bootstrap} within 30s")


class LiveSimulator(threading.Thread):
    """Plays a Simulator in real time, `speedup` times faster than the wall clock, at about `rate`
    events per wall-clock second, until stopped."""

    def __init__(self, bootstrap: str, topic: str, registry_url: str, rate: float = 40.0, speedup: float = 10.0,
                 trucks: int = 8, seed: int | None = None, on_error: Callable[[str], None] | None = None,
                 properties: Mapping[str, str] | None = None, registry_config: Mapping[str, str] | None = None) -> None:
        super().__init__(name="truck-simulator", daemon=True)
        self.bootstrap = bootstrap
        self.encode = Encoder(topic, registry_url, registry_config)
        self.properties = dict(properties or {})  # extra librdkafka settings (strom demo -X)
        self.topic = topic
        self.rate = rate
        self.speedup = speedup
        self.sim = Simulator(seed=seed if seed is not None else int(time.time()), trucks=trucks,
                             mean_gap_ms=1000.0 * speedup / rate)
        self.stop_event = threading.Event()
        self.produced = 0
        self.on_error = on_error

    def run(self) -> None:
        from confluent_kafka import Producer

        def report(err: Any, msg: Any) -> None:
            if err is not None and self.on_error is not None:
                self.on_error(str(err))

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "on_delivery": report,
                             **self.properties})
        wall0, sim0 = time.monotonic(), self.sim.clock_ms
        try:
            while not self.stop_event.is_set():
                event = self.sim.next_event()
                due = wall0 + (self.sim.clock_ms - sim0) / 1000.0 / self.speedup
                delay = due - time.monotonic()
                if delay > 0 and self.stop_event.wait(delay):
                    break
                key, value = self.encode(event)
                try:
                    producer.produce(self.topic, value=value, key=key)
                except BufferError:
                    producer.poll(0.1)
                    continue
                self.produced += 1
                producer.poll(0)
        finally:
            producer.flush(10)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)
