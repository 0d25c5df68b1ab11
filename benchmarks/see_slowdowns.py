#!/usr/bin/env python3
"""Can fleetbench see a real slowdown of 2-5%? (issue 40) Real extra GPU work, never multiplied records:
the user kernel benchmarks/kernels/mm_pad.py is mm.py's bf16 GEMM on operands zero-padded along K
(FLEETBENCH_MM_PAD columns), the same product with more work.

  h2h     head-to-head in one sweep: mm, mm_again (the same file: A/A) and mm_pad (~+2%: kernels/mm_pad.py) on
          the GLM-5 TP8 shapes, REPEAT sweeps, each a cold CLI process; per shape and sweep the paired
          B/A of mm_again and of mm_pad against mm (worker/pairing.py), flagged when the whole interval
          is beyond ±TIE (the `versus` rule).
  across  diff of separate sweeps: REPEAT sweeps of mm alone, then REPEAT with mm's file swapped for
          mm_pad at each PAD; `diff` (orchestrator/analysis/diff.py, the default threshold and others) of
          base i against base j (A/A) and of base i against slowed i.

    python benchmarks/see_slowdowns.py h2h -i HOSTS --runs-dir DIR [--repeat 3] [--out FILE.md]
    python benchmarks/see_slowdowns.py across -i HOSTS --runs-dir DIR [--repeat 3] [--pads 192,320]

Run with the repo on PYTHONPATH (device_check.sh's `slowdowns-h2h` / `slowdowns-across` steps do).
Prints Markdown; --out also writes it.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "benchmarks" / "kernels"
TIMING = {"mode": "graph", "l2": "cold", "target_rel_ci": 0.01, "budget_s": 0.3}  # the seed sweep's


def sweep_file(folder: Path, name: str, backends: list[dict]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": name, "backends": backends, "shapes": [{"preset": "glm5-tp8"}], "timing": TIMING}, sort_keys=False
        )
    )
    return path


def run(sweep: Path, inventory: Path, runs: Path, env: dict) -> tuple[str, float]:
    """One cold CLI sweep: (its run folder, wall seconds)."""
    before = {p for p in runs.iterdir()} if runs.exists() else set()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(sweep),
            "-i",
            str(inventory),
            "--runs-dir",
            str(runs),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    new = sorted(p for p in runs.iterdir() if p not in before and p.is_dir())
    if not new:
        raise SystemExit(f"the sweep did not start (exit {proc.returncode}): {proc.stderr[-2000:]}")
    print(f"{sweep.stem}: exit {proc.returncode}, {wall:.1f} s, {new[-1].name}", file=sys.stderr, flush=True)
    return str(new[-1]), wall


def records_of(run_dir: str) -> dict[tuple, object]:
    """(backend, m, n, k) -> the case's record, over the run's one host."""
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import resolve_run

    out = {}
    for slot in load_slots(resolve_run(Path(run_dir).parent, run_dir)):
        for _, rec in slot.records.values():
            out[(rec.case.backend, rec.case.m, rec.case.n, rec.case.k)] = rec
    return out


def flag(interval, tie: float) -> str:
    if interval is None:
        return "none"
    if interval.low > 1 + tie:
        return "slower"
    if interval.high < 1 / (1 + tie):
        return "faster"
    return "-"


def h2h(args) -> str:
    from worker.pairing import pair_interval, paired_rounds

    folder = Path(tempfile.mkdtemp(prefix="see-h2h-"))
    sweep = sweep_file(
        folder,
        "see-h2h",
        [
            {"name": "mm", "file": str(KERNELS / "mm.py")},
            {"name": "mm_again", "file": str(KERNELS / "mm.py")},
            {"name": "mm_pad", "file": str(KERNELS / "mm_pad.py")},
        ],
    )
    rows, walls = [], []
    for i in range(args.repeat):
        run_dir, wall = run(sweep, args.inventory, args.runs_dir, {"FLEETBENCH_MM_PAD": str(args.pad)})
        walls.append(wall)
        recs = records_of(run_dir)
        for (backend, m, n, k), base in sorted(recs.items()):
            if backend != "mm" or base.status != "ok":
                continue
            row = {
                "sweep": i + 1,
                "m": m,
                "n": n,
                "k": k,
                "mm_us": base.timing.median_us,
                "rounds": len(base.timing.rounds),
                "stop": base.timing.rounds_stop,
            }
            for other in ("mm_again", "mm_pad"):
                rec = recs.get((other, m, n, k))
                ok = rec is not None and rec.status == "ok"
                iv = pair_interval(paired_rounds(base.timing, rec.timing)) if ok else None
                row[other] = iv
                row[other + "_flag"] = flag(iv, args.tie) if ok else f"not ok: {rec.status if rec else 'missing'}"
                row[other + "_medians"] = rec.timing.median_us / base.timing.median_us if ok else None
            rows.append(row)
    lines = [
        f"## Head-to-head: mm against mm_again (A/A) and mm_pad (K padded: {args.pad}), "
        f"{args.repeat} sweeps, tie ±{args.tie:.0%}",
        "",
        "| sweep | M×N×K | mm µs | rounds (stop) | A/A B/A [95%] | flag | +pad B/A [95%] | ± | flag | "
        "+pad ratio of medians |",
        "|---|---|---:|---|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        aa, pad, medians = r["mm_again"], r["mm_pad"], r["mm_pad_medians"]
        half = "" if pad is None else f"{pad.half_width:.2%}"
        lines.append(
            f"| {r['sweep']} | {r['m']}×{r['n']}×{r['k']} | {r['mm_us']:.2f} | {r['rounds']} ({r['stop']}) | "
            f"{fmt(aa)} | {r['mm_again_flag']} | {fmt(pad)} | {half} | {r['mm_pad_flag']} | "
            f"{'' if medians is None else f'{medians:.4f}'} |"
        )
    n = len(rows)
    halves = [r["mm_pad"].half_width for r in rows if r["mm_pad"] is not None]
    lines += [
        "",
        f"- +pad flagged slower: **{sum(r['mm_pad_flag'] == 'slower' for r in rows)} of {n}** shape × sweep "
        f"pairs; A/A flagged: **{sum(r['mm_again_flag'] in ('slower', 'faster') for r in rows)} of {n}**",
        f"- interval half-width of +pad: median {statistics.median(halves):.2%}, max {max(halves):.2%}; "
        f"≤ 0.5% in {sum(h <= 0.005 for h in halves)} of {len(halves)}"
        if halves
        else "- no intervals",
        f"- sweep wall: {', '.join(f'{w:.1f}' for w in walls)} s (cold CLI processes)",
    ]
    return "\n".join(lines)


def fmt(iv) -> str:
    return "—" if iv is None else f"{iv.ratio:.4f} [{iv.low:.4f}, {iv.high:.4f}]"


def across(args) -> str:
    from orchestrator.analysis.diff import compare_sides, resolve_side

    folder = Path(tempfile.mkdtemp(prefix="see-across-"))
    base = sweep_file(folder, "see-across", [{"name": "mm", "file": str(KERNELS / "mm.py")}])
    (folder / "slowed").mkdir()
    slowed = sweep_file(folder / "slowed", "see-across", [{"name": "mm", "file": str(KERNELS / "mm_pad.py")}])
    runs = {0: [run(base, args.inventory, args.runs_dir, {})[0] for _ in range(args.repeat)]}
    for pad in args.pads:
        runs[pad] = [
            run(slowed, args.inventory, args.runs_dir, {"FLEETBENCH_MM_PAD": str(pad)})[0] for _ in range(args.repeat)
        ]
    pairs = {"A/A": list(itertools.combinations(runs[0], 2))}
    for pad in args.pads:
        pairs[f"+{pad} columns"] = list(zip(runs[0], runs[pad]))
    lines = [
        f"## Across runs: diff of separate sweeps of mm ({args.repeat} per setting), cells flagged",
        "",
        "| comparison | cells | true effect (ratio of medians) | "
        + " | ".join(f"SLOWER at {t:.1%}" for t in args.thresholds)
        + " | FASTER (any) |",
        "|---|---:|---:|" + "---:|" * (len(args.thresholds) + 1),
    ]
    for name, compared in pairs.items():
        cells, slower, faster, ratios = 0, {t: 0 for t in args.thresholds}, 0, []
        for a, b in compared:
            for t in args.thresholds:
                cmp = compare_sides(resolve_side(args.runs_dir, a), resolve_side(args.runs_dir, b), t)
                for c in cmp.cases:
                    if c.verdict in ("NOT-RUN", "NOT-OK", "ONLY-A", "ONLY-B"):
                        continue
                    slower[t] += c.verdict == "SLOWER"
                    if t == args.thresholds[0]:
                        cells += 1
                        faster += c.verdict == "FASTER"
                        ratios.append(c.ratio)
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else float("nan")
        lines.append(
            f"| {name} | {cells} | {geo:.4f} | "
            + " | ".join(str(slower[t]) for t in args.thresholds)
            + f" | {faster} |"
        )
    lines += ["", "Runs: " + "; ".join(f"{k}: {', '.join(Path(r).name for r in v)}" for k, v in runs.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["h2h", "across"])
    parser.add_argument("-i", "--inventory", type=Path, required=True, help="hosts.yaml with the one GPU host")
    parser.add_argument("--runs-dir", type=Path, required=True, help="where the sweeps' run folders go")
    parser.add_argument("--repeat", type=int, default=3, help="sweeps per setting (default 3)")
    parser.add_argument(
        "--pad", default="auto", help="h2h: columns of K mm_pad adds (default auto: 256 at M <= 64, else 128; ~+2%%)"
    )
    parser.add_argument("--tie", type=float, default=0.01, help="h2h: the tie margin (default 0.01)")
    parser.add_argument(
        "--pads",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[192, 320],
        help="across: the slowed settings, columns of K (default 192,320: ~+3%%, ~+5%%)",
    )
    parser.add_argument(
        "--thresholds",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.01, 0.015, 0.02, 0.03],
        help="across: diff thresholds to count at",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    text = h2h(args) if args.what == "h2h" else across(args)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
