"""What a benchmark run reports: counts, throughput and latency, as a table or as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MB = 1024 * 1024  # MB/s as kafka-producer-perf-test prints it: 2^20 bytes


@dataclass(frozen=True)
class LatencySummary:
    """Latency percentiles in milliseconds (nearest rank over every sample)."""

    count: int
    mean: float
    min: float
    p50: float
    p95: float
    p99: float
    p99_9: float
    max: float


@dataclass
class BenchResult:
    """One run of one workload.

    Counts: ``sent`` records handed to the producer, ``acknowledged`` records the broker confirmed,
    ``failed`` records whose delivery failed (``sent == acknowledged + failed`` once the producer has
    flushed; anything else is ``unresolved``), ``received`` records the consumer read (e2e: only this
    run's records, ``unique`` of them distinct, ``duplicates`` seen more than once, ``lost`` acknowledged
    but never received).
    """

    mode: str
    bootstrap: str
    topic: str
    settings: dict[str, Any]
    requested: int
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    unresolved: int = 0
    received: int = 0
    unique: int | None = None
    duplicates: int | None = None
    lost: int | None = None
    bytes: int = 0
    elapsed_s: float = 0.0
    latency: LatencySummary | None = None
    latency_kind: str | None = None
    errors: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # why a run ended before its record count ("duration", "timeout", ...)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_done(self) -> int:
        """The records the throughput figure counts: received for consume and e2e, acknowledged otherwise."""
        return self.received if self.mode in ("consume", "e2e") else self.acknowledged

    @property
    def records_per_s(self) -> float:
        return self.records_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        """Every record went through: nothing failed, unresolved or lost, and the run read or wrote all it
        was asked to (or all it could within its ``--duration``)."""
        if self.failed or self.unresolved or self.lost:
            return False
        complete = self.stopped == "duration"
        if self.mode == "produce":
            return self.acknowledged == self.sent and (complete or self.sent == self.requested)
        if self.mode == "consume":
            return complete or self.received >= self.requested
        return (self.acknowledged == self.sent and self.unique == self.sent
                and (complete or self.sent == self.requested))

    def note_error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "bootstrap_server": self.bootstrap,
            "topic": self.topic,
            "settings": self.settings,
            "records": {
                "requested": self.requested,
                "sent": self.sent,
                "acknowledged": self.acknowledged,
                "failed": self.failed,
                "unresolved": self.unresolved,
                "received": self.received,
            },
            "bytes": self.bytes,
            "elapsed_s": round(self.elapsed_s, 6),
            "records_per_s": round(self.records_per_s, 3),
            "mb_per_s": round(self.mb_per_s, 4),
            "latency_ms": None if self.latency is None else {
                k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self.latency).items()
            },
            "latency_kind": self.latency_kind,
            "errors": dict(self.errors),
            "stopped": self.stopped,
            "ok": self.ok,
        }
        if self.unique is not None:
            out["records"]["unique"] = self.unique
            out["records"]["duplicates"] = self.duplicates
            out["records"]["lost"] = self.lost
        out.update(self.extra)
        return out
