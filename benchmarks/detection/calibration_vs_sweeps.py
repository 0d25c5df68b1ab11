#!/usr/bin/env python3
"""Do the sweeps read the +2% copies as the calibration did? (issue 40) For every stored lease with both a
calibration (results/slowdowns-calibrate-TAG.md) and a head-to-head step (results/slowdowns-h2h-TAG.md),
per shape: the effect the calibration read for the padding it chose for +2%, beside the median over the
head-to-head sweeps of mm_pad's paired B/A against mm (the same padding, timed by fleetbench), and how
many leases read them more than --gap apart, either way.

    python -m benchmarks.detection.calibration_vs_sweeps [--results benchmarks/results] [--gap 0.01] [--out FILE.md]

Reads only the stored Markdown; prints Markdown.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from benchmarks.harness import publish

CALIBRATED = re.compile(r"^\| (\d+)×(\d+)×(\d+) \| [\d.]+ \| (\d+) \(([\d.]+)")  # the first target's cell: +2%
H2H_ROW = re.compile(r"^\| \d+ \| (\d+)×(\d+)×(\d+) \|(?:[^|]*\|){4} ([\d.]+) \[")  # sweep, shape, ..., +pad B/A


def calibrated(text: str) -> dict[tuple[int, int, int], float]:
    return {tuple(int(x) for x in m.groups()[:3]): float(m[5]) for m in map(CALIBRATED.match, text.splitlines()) if m}


def swept(text: str) -> dict[tuple[int, int, int], float]:
    rows: dict[tuple[int, int, int], list[float]] = {}
    for m in filter(None, map(H2H_ROW.match, text.splitlines())):
        rows.setdefault(tuple(int(x) for x in m.groups()[:3]), []).append(float(m[4]))
    return {shape: statistics.median(v) for shape, v in rows.items()}


def leases(results: Path) -> list[tuple[str, dict, dict]]:
    found = []
    for h2h in sorted(results.glob("slowdowns-h2h-*.md")):
        tag = h2h.stem.removeprefix("slowdowns-h2h-")
        cal = results / f"slowdowns-calibrate-{tag}.md"
        if cal.exists():
            found.append((tag, calibrated(cal.read_text()), swept(h2h.read_text())))
    return found


def report(found: list[tuple[str, dict, dict]], gap: float) -> str:
    shapes = sorted({s for _, c, w in found for s in c if s in w}, key=lambda s: (s[1], s[0]))
    head = "| lease | " + " | ".join(f"{m}×{n}" for m, n, _ in shapes) + " |"
    lines = [
        "## The +2% copies: the calibration's effect / the head-to-head sweeps' paired B/A (median over sweeps)",
        "",
        head,
        "|---|" + "---|" * len(shapes),
    ]
    lower = {s: 0 for s in shapes}
    higher = {s: 0 for s in shapes}
    for tag, cal, swp in found:
        cells = []
        for s in shapes:
            if s in cal and s in swp:
                mark = "**" if abs(swp[s] - cal[s]) > gap else ""
                lower[s] += swp[s] < cal[s] - gap
                higher[s] += swp[s] > cal[s] + gap
                cells.append(f"{mark}{cal[s]:.3f} / {swp[s]:.3f}{mark}")
            else:
                cells.append("")
        lines.append(f"| {tag} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Bold: more than {gap:.1%} apart. Leases whose sweeps read the copy more than {gap:.1%} below / above "
        "the calibration, per shape: "
        + "; ".join(f"{m}×{n} {lower[(m, n, k)]} / {higher[(m, n, k)]}" for m, n, k in shapes),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results"), help="the stored results")
    ap.add_argument("--gap", type=float, default=0.01, help="apart by more than this (default 0.01)")
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    args = ap.parse_args(argv)
    found = leases(args.results)
    if not found:
        print(f"calibration_vs_sweeps: no lease in {args.results} has both steps", file=sys.stderr)
        return 2
    return publish([report(found, args.gap)], args.out)


if __name__ == "__main__":
    sys.exit(main())
