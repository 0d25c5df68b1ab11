#!/usr/bin/env python3
"""What fewer interleaved cycles per pair would cost the head-to-head verdicts (issue 40). After settling,
a unit's pairs sample 12 cycles (Tuning.paired_cycles; every stored lease's worker did, since dd3ee76),
about 70 ms of GPU time per unit and round on the seed shapes: a seed sweep's pairs are some 15% of its
wall. A round's paired samples are its settling's drift-free tail, then those 12 cycles, one after the
other, so dropping a round's last 12 - C cycles leaves what sampling C cycles would have measured. For
every stored lease's head-to-head sweeps (`slowdowns-h2h`: mm, mm_again, mm_pad), this judges mm_pad (the
calibrated ~+2% copy) and mm_again (identical) against mm as `versus` does (tie ±1%) from those cycles,
with the slot's pair prior taken from the same cycles.

What it cannot say: a case's rounds stopped on the intervals of all 12 cycles (rounds until sure), and
with fewer a case might have got another round; the figures are of the rounds the sweeps took.

    python -m benchmarks.detection.pair_cycles benchmarks/results/slowdowns-seed-*.runs.tar.xz
        [--cycles 12,10,8,6] [--tie 0.01] [--out FILE.md]

Prints Markdown: per lease and C, the +pad cells flagged slower, the A/A cells flagged either way, and the
+pad interval's half-width (median, and how many within 0.5%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.detection.false_flags import lease_folder, lease_name
from benchmarks.detection.see_slowdowns import flag, sweep_of
from benchmarks.harness import publish
from worker.contract.pairing import pair_interval, paired_rounds
from worker.measure.tuning import TUNING

HALF_WIDTH_TARGET = 0.005  # issue 40's target for the +2% copy's interval


def sampled_cycles(a, b, cycles: int) -> list[list[float]]:
    """The pairs of two cases' rounds (paired_rounds), each round without its last paired_cycles - `cycles`
    cycles: as if it had sampled `cycles` after settling."""
    drop = TUNING.paired_cycles - cycles
    return [logs[: len(logs) - drop] for logs in paired_rounds(a, b)]


def judge_lease(folder: Path, cycle_counts: list[int], tie: float) -> dict[int, dict]:
    """Per C: cells, +pad flagged slower, A/A flagged, and the +pad half-widths, over the lease's h2h sweeps."""
    from orchestrator.analysis.headtohead import pair_prior
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import RunStore

    out = {c: {"cells": 0, "pad": 0, "again": 0, "widths": [], "taken": 0} for c in cycle_counts}
    runs = sorted(p for p in folder.iterdir() if p.is_dir() and sweep_of(p.name) == "see-h2h")
    for run in runs:
        for slot in load_slots(RunStore(run)):
            by_shape: dict[tuple, dict] = {}
            for _, rec in slot.records.values():
                if rec.status == "ok" and rec.timing is not None:
                    by_shape.setdefault((rec.case.m, rec.case.n, rec.case.k), {})[rec.case.backend] = rec
            for c in cycle_counts:
                prior = pair_prior(slot, lambda x, y, c=c: sampled_cycles(x, y, c))
                for members in by_shape.values():
                    if not {"mm", "mm_again", "mm_pad"} <= members.keys():
                        continue
                    base = members["mm"].timing
                    pad = pair_interval(sampled_cycles(base, members["mm_pad"].timing, c), prior)
                    again = pair_interval(sampled_cycles(base, members["mm_again"].timing, c), prior)
                    out[c]["cells"] += 1
                    out[c]["taken"] = max([out[c]["taken"], *map(len, paired_rounds(base, members["mm_pad"].timing))])
                    out[c]["pad"] += flag(pad, tie) == "slower"
                    out[c]["again"] += flag(again, tie) in ("slower", "faster")
                    if pad is not None:
                        out[c]["widths"].append(pad.half_width)
    return out


def report(paths: list[Path], cycle_counts: list[int], tie: float) -> str:
    lines = [
        f"## Head-to-head verdicts as if each round had sampled C cycles after settling, not "
        f"{TUNING.paired_cycles} (tie ±{tie:.0%}; cycles taken: the most a round of the lease's sweeps holds, "
        "its settling's tail included)",
        "",
        "| lease | C | cycles taken | cells | +pad flagged slower | identical flagged | +pad half-width, median | "
        "within 0.5% |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals = {c: {"cells": 0, "pad": 0, "again": 0, "widths": [], "taken": 0} for c in cycle_counts}
    for path in paths:
        with lease_folder(path) as folder:
            found = judge_lease(folder, cycle_counts, tie)
        if not found[cycle_counts[0]]["cells"]:
            continue
        for c in cycle_counts:
            f = found[c]
            for k in ("cells", "pad", "again"):
                totals[c][k] += f[k]
            totals[c]["widths"] += f["widths"]
            totals[c]["taken"] = max(totals[c]["taken"], f["taken"])
            lines.append(row(lease_name(Path(path)), c, f))
    lines += [row("**all**", c, totals[c]) for c in cycle_counts]
    return "\n".join(lines)


def row(name: str, cycles: int, f: dict) -> str:
    widths = f["widths"]
    median = f"{100 * statistics.median(widths):.2f}%" if widths else "-"
    within = sum(w <= HALF_WIDTH_TARGET for w in widths)
    return f"| {name} | {cycles} | {f['taken']} | {f['cells']} | {f['pad']} | {f['again']} | {median} | {within} |"


def cycle_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if any(v < 6 or v % 2 or v > TUNING.paired_cycles for v in values):  # a round needs 3 twos (pairing.py)
        raise argparse.ArgumentTypeError(
            f"each count is even, at least 6 (3 twos) and at most {TUNING.paired_cycles}: {text!r}"
        )
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("leases", nargs="+", type=Path, help="run folders' archives (.runs.tar.xz) or folders")
    parser.add_argument("--cycles", type=cycle_list, default=[12, 10, 8, 6], help="cycle counts (default 12,10,8,6)")
    parser.add_argument("--tie", type=float, default=0.01, help="the tie margin (default 0.01, versus's)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    missing = [p for p in args.leases if not p.exists()]
    if missing:
        print(f"pair_cycles: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    return publish([report(args.leases, args.cycles, args.tie)], args.out)


if __name__ == "__main__":
    sys.exit(main())
