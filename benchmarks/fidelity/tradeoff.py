"""What a faster sweep costs: the seed sweep run with each of several `timing` settings, each as a cold
CLI process (`fleetbench run`, exactly as a user starts it), one after another in one process of this
script; then every run's medians held against one independent reference settled for 300 ms (the median of
3 timings of each case: benchmarks/fidelity/fidelity.py `runs_against_reference`), measured after the runs in
this process.

    python -m benchmarks.fidelity.tradeoff -i HOSTS.yaml --runs-dir RUNS [--sweep sweeps/glm5_tp8.yaml]
        [--variants default,rounds-2,...] [--also RUN...] [--out FILE.md]

Each variant is the sweep's own `timing` with the variant's fields on top (VARIANTS). Prints a Markdown
table: wall seconds of the CLI process, the worker's seconds inside cases, the timed rounds, and how many
baseline cells read within ±5% of the reference (with the worst ratio), then fidelity's per-cell table.
Needs a CUDA GPU for the reference; the runs go where the inventory says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from benchmarks.harness import ROOT
from benchmarks.harness.coldrun import cold_run

VARIANTS: dict[str, dict] = {
    "default": {},
    "rounds-2": {"rounds": 2},
    "rounds-1": {"rounds": 1},
    "settle-50": {"settle_ms": 50.0},
    "min-samples-5": {"min_samples": 5},
    "rounds-1-settle-50": {"rounds": 1, "settle_ms": 50.0},
    "warmup-5": {"warmup_ms": 5.0},
    "warmup-25": {"warmup_ms": 25.0},
    "warmup-5-min-samples-6": {"warmup_ms": 5.0, "min_samples": 6},
}


def sweep_with(sweep: Path, name: str, overrides: dict, into: Path) -> Path:
    """The sweep file with `overrides` on top of its timing, written beside the runs."""
    doc = yaml.safe_load(sweep.read_text(encoding="utf-8"))
    doc["timing"] = {**(doc.get("timing") or {}), **overrides}
    doc["name"] = f"{doc.get('name', 'sweep')}-{name}"
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def inside(run: Path) -> tuple[float, int]:
    """(the worker's seconds inside cases, timed rounds) of a run's stored records."""
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import RunStore

    seconds, rounds = 0.0, 0
    for slot in load_slots(RunStore(run)):
        for _, rec in slot.records.values():
            seconds += rec.duration_s or 0.0
            rounds += len(rec.timing.rounds) if rec.timing else 0
    return seconds, rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "glm5_tp8.yaml")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--reference-settle-ms", type=float, default=300.0)
    ap.add_argument("--reference-passes", type=int, default=3, help="timings of the reference per case (fidelity.py)")
    ap.add_argument(
        "--also",
        type=Path,
        nargs="*",
        default=[],
        help="runs already stored (e.g. two identical default sweeps) to hold against the same reference",
    )
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    done = [(f"as stored: {run.name}", None, None, run) for run in args.also]
    for name in names:
        path = sweep_with(args.sweep, name, VARIANTS[name], args.runs_dir / "tradeoff-sweeps")
        cold = cold_run(path, args.inventory, args.runs_dir)
        print(
            f"{name}: exit {cold.returncode}, wall {cold.wall_s:.1f} s, run {cold.run_dir}", file=sys.stderr, flush=True
        )
        if cold.run_dir is None:
            print(cold.stderr[-600:], file=sys.stderr)
            return 1
        done.append((name, cold.wall_s, cold.returncode, cold.run_dir))
    from benchmarks.fidelity.fidelity import agrees, runs_against_reference

    md, ratios = runs_against_reference([run for *_, run in done], args.reference_settle_ms, args.reference_passes)
    lines = [
        f"# What a faster sweep costs ({args.sweep.name})",
        "",
        f"Reproduce: `python -m benchmarks.fidelity.tradeoff -i HOSTS --runs-dir RUNS --variants {','.join(names)}"
        + (" --also RUN..." if args.also else "")
        + "`. Each variant a cold `fleetbench run`, in this order; "
        "the reference after all of them. Stored runs (`--also`) have no wall time here.",
        "",
        "| variant | timing on top of the sweep's | exit | wall s | in cases s | timed rounds | "
        f"within ±5% of the {args.reference_settle_ms:g} ms reference | worst ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, wall, rc, run), got in zip(done, ratios):
        seconds, rounds = inside(run)
        worst = max(got, key=lambda r: abs(r - 1)) if got else None
        within = sum(agrees(r) for r in got)
        if name in VARIANTS:
            over = ", ".join(f"{k}: {v:g}" for k, v in VARIANTS[name].items()) or "(none)"
        else:  # a stored run (--also)
            over = "(its own)"
        lines.append(
            f"| {name} | {over} | {'' if rc is None else rc} | {'' if wall is None else f'{wall:.1f}'} | "
            f"{seconds:.1f} | {rounds} | {within} of {len(got)} | "
            + (f"{worst:.3f}" if worst is not None else "")
            + " |"
        )
    text = "\n".join(lines) + "\n\n" + md
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
