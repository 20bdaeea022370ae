#!/usr/bin/env python3
"""Summarise py-spy raw (collapsed stack) profiles as text: the functions with the most samples of their
own (self) and including their callees (total), as a share of all non-idle samples.

    py-spy record --pid <broker pid> --rate 250 --format raw --nonblocking -o prof.txt   # Ctrl-C to stop
    .venv/bin/python benchmarks/profile_summary.py prof.txt [--top 25] [--under handle]

Frames are grouped by function (file and name, not line). ``--under NAME`` keeps only stacks that pass
through a frame whose function name contains NAME (e.g. ``produce.py`` or ``handle``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::(?P<line>\d+))?\)$")


def function_of(frame: str) -> str:
    m = FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    return f"{m.group('func')} ({m.group('file')})"


def load(paths: list[Path], under: str | None) -> tuple[Counter[str], Counter[str], int]:
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [function_of(f) for f in stack.split(";")]
            if under is not None and not any(under in f for f in frames):
                continue
            samples += count
            self_counts[frames[-1]] += count
            for f in set(frames):
                total_counts[f] += count
    return self_counts, total_counts, samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profiles", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--under", default=None, help="Only stacks through a frame containing this text.")
    p.add_argument("--only", default="strom/", help="Total table: only functions whose file contains this "
                   "text (default strom/; '' for all).")
    args = p.parse_args(argv)
    self_counts, total_counts, samples = load(args.profiles, args.under)
    if not samples:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{samples} samples" + (f" through '{args.under}'" if args.under else ""))
    print(f"\nself (the function itself, not its callees), top {args.top}:")
    for func, n in self_counts.most_common(args.top):
        print(f"  {100 * n / samples:5.1f}%  {func}")
    print(f"\ntotal (including callees), {args.only or 'all'} functions, top {args.top}:")
    shown = 0
    for func, n in total_counts.most_common():
        if args.only and args.only not in func:
            continue
        print(f"  {100 * n / samples:5.1f}%  {func}")
        shown += 1
        if shown >= args.top:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
