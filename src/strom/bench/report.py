"""The human-readable summary of a run (``--json`` prints :meth:`BenchResult.to_json` instead)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from strom.bench.result import BenchResult


def _fmt_ms(v: float) -> str:
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def render(result: BenchResult, console: Console) -> None:
    s = result.settings
    head = (f"strom bench {result.mode}: {result.bootstrap} topic={result.topic} "
            f"partitions={s.get('partitions')} records={result.requested:,} x {s.get('record_size')} B")
    if result.mode in ("produce", "e2e"):
        rate = s.get("target_rate") or 0
        head += (f" acks={s.get('acks')} linger.ms={s.get('linger_ms')} batch.size={s.get('batch_size')}"
                 f" compression={s.get('compression')} target={'unthrottled' if not rate else f'{rate:g} rec/s'}")
    console.print(head, markup=False, highlight=False)

    counts = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    names: list[str] = []
    values: list[str] = []
    if result.mode in ("produce", "e2e"):
        names += ["sent", "acknowledged", "failed"]
        values += [f"{result.sent:,}", f"{result.acknowledged:,}", f"{result.failed:,}"]
        if result.unresolved:
            names.append("unresolved")
            values.append(f"{result.unresolved:,}")
    if result.mode in ("consume", "e2e"):
        names.append("received")
        values.append(f"{result.received:,}")
    if result.mode == "e2e":
        names += ["duplicates", "lost"]
        values += [f"{result.duplicates or 0:,}", f"{result.lost or 0:,}"]
    for n in names:
        counts.add_column(n, justify="right")
    counts.add_row(*values)
    console.print(counts)

    console.print(f"throughput: {result.records_per_s:,.1f} records/s, {result.mb_per_s:,.2f} MB/s "
                  f"({result.bytes:,} bytes in {result.elapsed_s:.3f} s)", markup=False, highlight=False)
    if result.latency is not None:
        lat = result.latency
        console.print(f"latency ms ({result.latency_kind}): p50 {_fmt_ms(lat.p50)}  p95 {_fmt_ms(lat.p95)}  "
                      f"p99 {_fmt_ms(lat.p99)}  p99.9 {_fmt_ms(lat.p99_9)}  max {_fmt_ms(lat.max)}  "
                      f"mean {_fmt_ms(lat.mean)}", markup=False, highlight=False)
    delivery = result.extra.get("delivery_latency_ms")
    if delivery:
        console.print("delivery latency ms: " + "  ".join(
            f"{k.replace('_', '.')} {_fmt_ms(v)}" for k, v in delivery.items()), markup=False, highlight=False)
    if result.extra.get("first_record_s") is not None:
        console.print(f"first record after {result.extra['first_record_s'] * 1000:.1f} ms", highlight=False)
    if result.errors:
        console.print("errors: " + ", ".join(f"{k} x{v}" for k, v in sorted(result.errors.items())),
                      markup=False, highlight=False)
    if result.stopped:
        console.print(f"stopped early: {result.stopped}", markup=False, highlight=False)
    if not result.ok:
        console.print("NOT OK: some records were not acknowledged or not received", style="bold red")
