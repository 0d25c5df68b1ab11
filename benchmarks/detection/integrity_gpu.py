"""The integrity checks of issue 31 on a real sweep: one cold-CLI run of a sweep (default the seed sweep) on
this machine's `local` host, then what the checks found and what they cost. Prints Markdown: the
statuses, every row whose integrity is not `pass` (an honest backend flagged would be listed here), and
the checks' time (each round's `integrity_s`, worker/check/integrity.py) against the sweep's wall time and
against the time of its timed rounds.

    python -m benchmarks.detection.integrity_gpu --work /tmp/integrity [--sweep sweeps/glm5_tp8.yaml] [--site /tmp/site]
                                       [--runs 2]

--runs N: the sweep N times, each a cold CLI process (the first on a fresh machine builds FlashInfer's
JIT kernels; the later ones find them cached).

--site: the folder of carried wheels the worker needs on PYTHONPATH (the device's /tmp/site).
benchmarks/results/integrity-gpu-h200.md holds the H200's output and the command that made it.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

from benchmarks.harness import ROOT as REPO
from benchmarks.harness.coldrun import cold_run
from orchestrator.analysis.merge import merged_rows
from orchestrator.runs.slots import load_slots
from orchestrator.runs.store import RunStore
from orchestrator.views.tables import row_reason


def write_inventory(path: Path, site: str) -> None:
    """hosts.yaml's `local` host with this Python and the carried site-packages (as device_check.sh does)."""
    import yaml

    raw = yaml.safe_load((REPO / "hosts.yaml").read_text())
    local = next(h for h in raw["hosts"] if h["name"] == "local")
    env = {**(local.get("env") or {}), **({"PYTHONPATH": site} if site else {})}
    doc = {"hosts": [{**local, "python": sys.executable, "env": env}]}
    if raw.get("defaults"):
        doc["defaults"] = raw["defaults"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="a folder for the inventory and the run")
    parser.add_argument("--sweep", default="sweeps/glm5_tp8.yaml")
    parser.add_argument("--site", default="", help="carried site-packages for the worker's PYTHONPATH")
    parser.add_argument("--runs", type=int, default=1, help="how many times to run the sweep")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    inventory = args.work / "hosts.yaml"
    write_inventory(inventory, args.site)
    return max(report_run(args, inventory) for _ in range(args.runs))


def report_run(args, inventory: Path) -> int:
    """One cold-CLI run of the sweep and its report; 1 when it stored no run."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [args.site, str(REPO)]))}
    proc = cold_run(args.sweep, inventory, args.work / "runs", env=env)
    wall = proc.wall_s
    # A run is stored when the CLI says so (a folder left by a start that failed is not one).
    stored = [line.split(" stored in ", 1)[1].strip() for line in proc.stderr.splitlines() if " stored in " in line]
    if not stored:
        print(f"the sweep stored no run (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return 1
    store = RunStore(Path(stored[-1]))
    slots = load_slots(store)
    rows = merged_rows(store, slots)
    print(f"# The integrity checks on `{args.sweep}` (run {store.run_id})\n")
    print(
        f"One cold-CLI run: exit {proc.returncode}, wall {wall:.1f} s; statuses: "
        f"{dict(collections.Counter(r.status for r in rows))} of {len(rows)} rows; integrity: "
        f"{dict(collections.Counter(str(r.integrity) for r in rows))}.\n"
    )
    flagged = [r for r in rows if r.integrity not in (None, "pass")]
    print(f"Rows an integrity check failed: {len(flagged)}\n")
    if flagged:
        print("| backend | shape | status | integrity | reason |\n|---|---|---|---|---|")
        for r in flagged:
            print(f"| {r.backend} | {r.m}x{r.n}x{r.k} | {r.status} | {r.integrity} | {row_reason(r)[:200]} |")
        print()
    other = [r for r in rows if r.status not in ("ok", "unsupported", "unavailable") and r not in flagged]
    for r in other:
        print(f"- not ok: {r.backend} {r.m}x{r.n}x{r.k} {r.status}: {row_reason(r)[:200]}")
    integrity_s, in_rounds, by_backend = 0.0, 0.0, collections.Counter()
    n_rounds = 0
    for slot in slots:
        for _, rec in slot.records.values():
            for r in rec.timing.rounds if rec.timing else []:
                n_rounds += 1
                spent = r.integrity_s or 0.0
                integrity_s += spent
                by_backend[rec.case.backend] += spent
                in_rounds += sum(getattr(r, p) or 0.0 for p in ("prepare_s", "check_s", "timing_s", "probe_s"))
    print(
        f"\n## What the checks cost\n\n{n_rounds} timed rounds. The integrity checks took {integrity_s:.2f} s: "
        f"{100 * integrity_s / wall:.2f}% of the sweep's wall time ({wall:.1f} s), "
        f"{100 * integrity_s / in_rounds if in_rounds else 0:.2f}% of the rounds' own time ({in_rounds:.1f} s).\n"
    )
    print("| backend | integrity s |\n|---|---:|")
    for backend, spent in by_backend.most_common():
        print(f"| {backend} | {spent:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
