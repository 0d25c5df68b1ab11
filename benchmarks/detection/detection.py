#!/usr/bin/env python3
"""Detection power of `diff` (issue 30): how often a known slowdown is flagged, and how often nothing
flags something, on the noise of real runs.

Input: A/A pairs, each two runs of the same sweep on the same host (e.g. the two seed sweeps of
`bash benchmarks/device_check.sh seed`). For each pair and each slowdown s, every timed case of B has
its timing multiplied by 1 + s (every round's median and every sample: what a kernel made s slower
would show on the same machine), and diff's own comparison (orchestrator/analysis/diff.py) judges A
against that B at each threshold. s = 0 is the A/A pair itself: any SLOWER or FASTER there is a false
flag. The slowdown is injected into measured records, not into a kernel on the GPU: what this measures
is the verdict rule's power given the run-to-run noise those runs had.

    python -m benchmarks.detection.detection RUN_A RUN_B [RUN_A2 RUN_B2 ...] [--slowdowns 0,0.01,0.02,0.05]
                                   [--thresholds 0.01,0.02,0.03]

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def slowed(side, factor: float):
    """The side with every timed record's numbers multiplied by `factor`."""
    import copy

    out = copy.copy(side)
    out.slots = []
    for slot in side.slots:
        records = {}
        for cid, (attempt, rec) in slot.records.items():
            t = rec.timing
            if t is not None and factor != 1.0:
                rounds = [r.model_copy(update={"median_us": r.median_us * factor}) for r in t.rounds]
                t = t.model_copy(
                    update={
                        "median_us": t.median_us * factor,
                        "p10_us": t.p10_us * factor,
                        "p90_us": t.p90_us * factor,
                        "mean_us": t.mean_us * factor,
                        "stdev_us": t.stdev_us * factor,
                        "samples_us": [x * factor for x in t.samples_us],
                        "rounds": rounds,
                    }
                )
                rec = rec.model_copy(update={"timing": t})
            records[cid] = (attempt, rec)
        out.slots.append(
            copy.replace(slot, records=records)
            if hasattr(copy, "replace")
            else type(slot)(**{**slot.__dict__, "records": records})
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="A/A pairs: RUN_A RUN_B [RUN_A2 RUN_B2 ...]")
    ap.add_argument("--slowdowns", default="0,0.01,0.02,0.03,0.05")
    ap.add_argument("--thresholds", default="0.01,0.02,0.03")
    args = ap.parse_args()
    if len(args.runs) % 2:
        ap.error("give the runs in pairs (A B)")
    from orchestrator.analysis.diff import compare_sides, resolve_side

    pairs = [
        (resolve_side(a.parent, str(a)), resolve_side(b.parent, str(b)))
        for a, b in zip(args.runs[::2], args.runs[1::2])
    ]
    slowdowns = [float(x) for x in args.slowdowns.split(",")]
    thresholds = [float(x) for x in args.thresholds.split(",")]
    print(f"{len(pairs)} A/A pair(s): " + "; ".join(f"{a.label} / {b.label}" for a, b in pairs) + "\n")
    print(
        "| threshold | slowdown injected into B | cases | SLOWER | FASTER | SAME | AMBIGUOUS | UNSTABLE | flagged SLOWER |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in thresholds:
        for s in slowdowns:
            counts: collections.Counter = collections.Counter()
            for a, b in pairs:
                cmp = compare_sides(a, slowed(b, 1 + s), t)
                for c in cmp.cases:
                    if c.a_us is not None and c.b_us is not None:
                        counts[c.verdict] += 1
            n = sum(counts.values())
            print(
                f"| {t:.0%} | {s:.0%} | {n} | {counts['SLOWER']} | {counts['FASTER']} | {counts['SAME']} | "
                f"{counts['AMBIGUOUS']} | {counts['UNSTABLE']} | {100 * counts['SLOWER'] / n if n else 0:.0f}% |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
