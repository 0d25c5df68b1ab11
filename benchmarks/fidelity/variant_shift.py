#!/usr/bin/env python3
"""Does a timing setting move a sweep's medians? (issue 40: the seed sweep's wall is bought with settings,
never with what it measures.) Over one lease's stored cold seed sweeps (device_check.sh `seed`, and
`tradeoff`'s variants, named glm5-tp8-VARIANT), the runs of the sweep names in --a (the setting before) and
those in --b (the setting after) are paired: each A with each B, and for scale each A with each other A and
each B with each other B. Each pair is judged by `diff` at HEAD on the time alone (an anchor would move with
the setting too): the geometric mean of B/A over the cells timed on both (built-ins, the oracle left out), its
smallest and largest cell, and the cells flagged SLOWER or FASTER at the threshold. A setting that moves
the medians shows as across pairs whose geometric means leave the range of the within pairs'.

    python -m benchmarks.fidelity.variant_shift benchmarks/results/slowdowns-seed-h100-s31a.runs.tar.xz \\
        --a glm5-tp8,glm5-tp8-default --b glm5-tp8-warmup-5 [--threshold 0.015] [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.detection.false_flags import lease_folder, lease_name
from benchmarks.detection.see_slowdowns import sweep_of
from benchmarks.harness import publish
from orchestrator.analysis.diff import compare_sides, resolve_side
from worker.contract.catalog import ORACLE_BACKENDS

WITHIN_A, WITHIN_B, ACROSS = "A against A", "B against B", "A against B"


class NothingToPair(Exception):
    """The lease lacks runs of a side, or a pair shares no case: one line for the user."""


@dataclass(frozen=True)
class PairShift:
    group: str
    a: str
    b: str
    cells: int
    geomean: float
    low: float
    high: float
    slower: int
    faster: int


def judge_pair(folder: Path, a: str, b: str, group: str, threshold: float) -> PairShift:
    rows = compare_sides(resolve_side(folder, a), resolve_side(folder, b), threshold, None).cases
    rows = [r for r in rows if r.ratio is not None and r.backend not in ORACLE_BACKENDS]
    if not rows:
        raise NothingToPair(f"variant_shift: {a} and {b} share no timed built-in case")
    ratios = [r.ratio for r in rows]
    return PairShift(
        group=group,
        a=a,
        b=b,
        cells=len(rows),
        geomean=statistics.geometric_mean(ratios),
        low=min(ratios),
        high=max(ratios),
        slower=sum(r.verdict == "SLOWER" for r in rows),
        faster=sum(r.verdict == "FASTER" for r in rows),
    )


def pairs_of(runs: list[str], names_a: list[str], names_b: list[str]) -> list[tuple[str, str, str]]:
    """(group, A run, B run): within A, within B, then each A against each B, runs in the order they ran."""
    runs_a = [r for r in sorted(runs) if sweep_of(r) in names_a]
    runs_b = [r for r in sorted(runs) if sweep_of(r) in names_b]
    return (
        [(WITHIN_A, x, y) for x, y in itertools.combinations(runs_a, 2)]
        + [(WITHIN_B, x, y) for x, y in itertools.combinations(runs_b, 2)]
        + [(ACROSS, x, y) for x in runs_a for y in runs_b]
    )


def report(lease: Path, names_a: list[str], names_b: list[str], threshold: float) -> list[str]:
    with lease_folder(lease) as folder:
        runs = [p.name for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").exists()]
        pairs = pairs_of(runs, names_a, names_b)
        if not any(g == ACROSS for g, _, _ in pairs):
            found = sorted({sweep_of(r) for r in runs})
            raise NothingToPair(
                f"variant_shift: {lease_name(lease)} needs runs of both sides (A: {','.join(names_a)}; "
                f"B: {','.join(names_b)}); its sweeps: {', '.join(found)}"
            )
        shifts = [judge_pair(folder, a, b, g, threshold) for g, a, b in pairs]
    lines = [
        f"## {lease_name(lease)}: A ({', '.join(names_a)}) against B ({', '.join(names_b)}), `diff` at "
        f"{threshold:.1%} on the time alone, per pair of cold sweeps",
        "",
        "| pair | A run | B run | cells | geomean B/A | smallest, largest | SLOWER | FASTER |",
        "|---|---|---|---:|---:|---|---:|---:|",
        *(
            f"| {s.group} | {s.a} | {s.b} | {s.cells} | {s.geomean:.4f} | {s.low:.3f}, {s.high:.3f} | "
            f"{s.slower} | {s.faster} |"
            for s in shifts
        ),
        "",
    ]
    for group in (WITHIN_A, WITHIN_B, ACROSS):
        mine = [s for s in shifts if s.group == group]
        if mine:
            lines.append(
                f"- {group}: {len(mine)} pair{'s' if len(mine) > 1 else ''}, geomean B/A {min(s.geomean for s in mine):.4f}–"
                f"{max(s.geomean for s in mine):.4f}; cells flagged {sum(s.slower + s.faster for s in mine)} of "
                f"{sum(s.cells for s in mine)}"
            )
    return lines


def names(text: str) -> list[str]:
    out = [n.strip() for n in text.split(",") if n.strip()]
    if not out:
        raise argparse.ArgumentTypeError("name at least one sweep, e.g. glm5-tp8 or glm5-tp8-warmup-5")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lease", type=Path, help="a lease's run folders: its archive (.runs.tar.xz) or folder")
    parser.add_argument("--a", type=names, required=True, help="sweep names of the setting before, comma-separated")
    parser.add_argument("--b", type=names, required=True, help="sweep names of the setting after, comma-separated")
    parser.add_argument("--threshold", type=float, default=0.015, help="diff's threshold (default 0.015)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if not args.lease.exists():
        print(f"variant_shift: no such file or folder: {args.lease}", file=sys.stderr)
        return 2
    if set(args.a) & set(args.b):
        print(f"variant_shift: a sweep on both sides: {', '.join(sorted(set(args.a) & set(args.b)))}", file=sys.stderr)
        return 2
    try:
        lines = report(args.lease, args.a, args.b, args.threshold)
    except NothingToPair as e:
        print(e, file=sys.stderr)
        return 2
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
