#!/usr/bin/env python3
"""Are diff's verdicts honest? The same sweep three times on one host, back to back:
  A, B  identical runs: diff A B must flag nothing (no SLOWER, no FASTER);
  C     the same, with the user kernel `mm` swapped for one doing 10% more work (benchmarks/kernels/
        mm_slower.py: every tenth call runs twice): diff A C must call mm's cases SLOWER and nothing else.
Each run is the sweep with `mm` added to its backends (benchmarks/kernels/mm.py in A and B).
Also per case the spread of the medians between A and B, |B/A - 1|.

    python -m benchmarks.detection.verdicts SWEEP -i HOSTS [--min-us 10] [--out FILE.md]

Runs the installed checkout's CLI (python -m orchestrator.cli); prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.harness import ROOT, publish
from benchmarks.harness.coldrun import cli, cold_run

SLOWED = "mm"  # the user kernel that does 10% more work in run C


def on_path(env=None) -> dict:
    """`env` with the repo first on PYTHONPATH, for the checkout's CLI and the worker it starts here."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **(env or {})}


def run(sweep: Path, inventory: Path, runs: Path, env=None) -> Path:
    done = cold_run(sweep, inventory, runs, env=on_path(env))
    if done.run_dir is None:
        raise SystemExit(f"the run did not start: {done.stderr[-2000:]}")
    print(done.stderr.strip().splitlines()[-1], flush=True)
    return done.run_dir


def with_kernel(sweep: Path, kernel_file: str, folder: Path) -> Path:
    """`sweep` with the user kernel `mm` (from benchmarks/kernels/) among its backends."""
    import yaml

    doc = yaml.safe_load(sweep.read_text())
    doc["backends"] = [*doc["backends"], {"name": SLOWED, "file": str(ROOT / "benchmarks" / "kernels" / kernel_file)}]
    for shape in doc["shapes"]:  # a preset's counts files are relative to the sweep
        if isinstance(shape.get("moe_layer"), dict) and "counts" in shape["moe_layer"]:
            shape["moe_layer"]["counts"] = str((sweep.parent / shape["moe_layer"]["counts"]).resolve())
    path = folder / f"{sweep.stem}-{Path(kernel_file).stem}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def diff(a: Path, b: Path) -> dict:
    proc = cli("diff", a, b, "--format", "json", env=on_path())
    if proc.returncode not in (0, 1):
        raise SystemExit(f"diff failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path)
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--min-us", type=float, default=10.0, help="the spread is reported for kernels at least this long")
    ap.add_argument("--runs-dir", type=Path, default=Path(tempfile.mkdtemp(prefix="fleetbench-verdicts-")))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    args.runs_dir.mkdir(parents=True, exist_ok=True)
    plain = with_kernel(args.sweep, "mm.py", args.runs_dir)
    a = run(plain, args.inventory, args.runs_dir)
    b = run(plain, args.inventory, args.runs_dir)
    c = run(with_kernel(args.sweep, "mm_slower.py", args.runs_dir), args.inventory, args.runs_dir)
    same, slower = diff(a, b), diff(a, c)
    timed = [x for x in same["cases"] if x["ratio"] is not None]
    long = [x for x in timed if min(x["a_us"], x["b_us"]) >= args.min_us]
    spread = sorted(abs(x["b_us"] / x["a_us"] - 1) for x in long)
    flagged_same = [x for x in same["cases"] if x["verdict"] in ("SLOWER", "FASTER")]
    target = [x for x in slower["cases"] if x["backend"] == SLOWED and x["ratio"] is not None]
    others = [x for x in slower["cases"] if x["backend"] != SLOWED and x["verdict"] in ("SLOWER", "FASTER")]
    lines = [
        f"runs: A {a.name}, B {b.name}, C {c.name} (C: {SLOWED} does 10% more work)",
        "",
        f"- A vs B: {len(timed)} timed cases; verdicts {dict(Counter(x['verdict'] for x in same['cases']))}; "
        f"**{len(flagged_same)} flagged** (SLOWER or FASTER)",
        f"- A vs B, kernels >= {args.min_us:g} us ({len(long)}): |B/A - 1| median "
        f"{statistics.median(spread):.2%}, max {max(spread):.2%}"
        if spread
        else "- no kernel that long",
        f"- A vs C, {SLOWED} ({len(target)} cases): verdicts {dict(Counter(x['verdict'] for x in target))}; "
        f"B/A median {statistics.median(x['ratio'] for x in target):.3f}"
        if target
        else f"- no {SLOWED} case",
        f"- A vs C, other backends flagged: {len(others)}",
        "",
        "| backend | M | N | K | A µs | B µs | B/A | verdict | C µs | C/A | 95% CI | verdict | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|---|",
    ]
    by_key = {x["key"]: x for x in slower["cases"]}
    for x in timed:
        y = by_key.get(x["key"], {})
        ci = f"{y['ci_low']:.3f}–{y['ci_high']:.3f}" if y.get("ci_low") is not None else ""
        lines.append(
            f"| {x['backend']} | {x['m']} | {x['n']} | {x['k']} | {x['a_us']:.2f} | {x['b_us']:.2f} | "
            f"{x['ratio']:.3f} | {x['verdict']} | {y.get('b_us') or 0:.2f} | {y.get('ratio') or 0:.3f} | {ci} | "
            f"{y.get('verdict', '')} | {y.get('note', '')} |"
        )
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
