"""Client quotas as Kafka has them: byte rates for produce and fetch and a share of request-handling
time, set per user, per client id or per both (each with a default), measured over a sliding
window, and enforced by throttling: the response carries throttle_time_ms and the connection is not
read from until that time has passed (KIP-219).

Pure: no I/O. The broker feeds it what each request cost (strom.broker.quota_manager).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # accepted and stored; strom does not throttle on it
QUOTA_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE})

USER, CLIENT_ID, IP = "user", "client-id", "ip"

# An entity: the user (None = not part of it) and the client id, each a name, or DEFAULT for "the
# default of that kind" (Kafka's <default>).
DEFAULT = "<default>"


class InvalidQuota(ValueError):
    """A quota entity or value Kafka would refuse (INVALID_REQUEST), with the reason."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    user: str | None = None  # a name, DEFAULT, or None when the entity has no user part
    client_id: str | None = None

    def describe(self) -> list[tuple[str, str | None]]:
        """As Kafka's APIs spell it: (entity type, name or None for the default)."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        return out

    @staticmethod
    def parse(parts: list[tuple[str, str | None]]) -> QuotaEntity:
        user: str | None = None
        client: str | None = None
        seen: set[str] = set()
        for kind, name in parts:
            if kind in seen:
                raise InvalidQuota(f"entity type '{kind}' given twice")
            seen.add(kind)
            if kind == USER:
                user = DEFAULT if name is None else name
            elif kind == CLIENT_ID:
                client = DEFAULT if name is None else name
            elif kind == IP:
                raise InvalidQuota("ip quotas (connection rates) are not supported")
            else:
                raise InvalidQuota(f"unknown entity type '{kind}'")
        if user is None and client is None:
            raise InvalidQuota("an entity needs a user or a client-id")
        return QuotaEntity(user, client)


def validate_value(key: str, value: float) -> None:
    if key not in QUOTA_KEYS:
        raise InvalidQuota(f"unknown quota '{key}'; one of {', '.join(sorted(QUOTA_KEYS))}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidQuota(f"quota {key} must be a positive number, not {value}")


def candidates(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities whose quotas apply to a (user, client id), most specific first (Kafka's order)."""
    return [QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT), QuotaEntity(user, None),
            QuotaEntity(DEFAULT, client_id), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
            QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT)]


def resolve(quotas: dict[QuotaEntity, dict[str, float]], user: str, client_id: str,
            key: str) -> tuple[QuotaEntity, float] | None:
    """(the entity the quota is shared within, its bound) for one client and quota key; None when no
    quota applies. A default entity's quota is each user's (client's) own: the entity it is
    counted against has the real name in place of the default, as in Kafka."""
    for entity in candidates(user, client_id):
        bound = quotas.get(entity, {}).get(key)
        if bound is not None:
            counted = QuotaEntity(user if entity.user is not None else None,
                                  client_id if entity.client_id is not None else None)
            return counted, bound
    return None


class QuotaBucket:
    """How far a client is ahead of its quota: a token bucket that fills at the quota's rate up to
    ``burst`` (quota.window.num - 1 windows of quota.window.size.seconds, the span Kafka's windowed
    rate measures a first burst over). A request's cost is taken out; while the bucket is below
    zero the client must wait until the quota has paid the debt back. Kafka measures the same bound
    with a windowed rate, which lets a client run in a saw-tooth around its quota; the bucket holds
    it to the quota itself once the first burst is spent."""

    __slots__ = ("rate", "burst", "tokens", "last")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = now

    def full_at(self) -> float:
        """When the bucket is full again if nothing more is taken: from then on it is the same as a
        new one, so a client gone idle can be forgotten."""
        return self.last + (self.burst - self.tokens) / self.rate

    def take(self, value: float, now: float) -> float:
        """Record ``value``; the seconds the client must now wait (0: it is within its quota)."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate) - value
        self.last = now
        return -self.tokens / self.rate if self.tokens < 0 else 0.0
