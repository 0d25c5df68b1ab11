#!/usr/bin/env python3
"""How fast a dead or frozen host is given up, and what it costs: a 4-host loopback sshd fleet, a CPU
sweep on every host, no wall-clock `timeout` anywhere (the defaults: stall timeout 60 s, the limit
derived from the sweep), and per repetition one host
  frozen  SIGSTOP on its sshd and every session process, right after its first case starts, or
  killed  SIGKILL on its sshd and every session process, once two of its cases have ended.
Measured: seconds from the fault to the host's outcome.json, to the command's return, the healthy hosts'
outcomes, and the result lines lost (lines in the host's own results.jsonl, after thaw or restart, that
no attempt of the run holds once `rerun --failed --resume` has run).

    python -m benchmarks.fleet.liveness --reps 2 [--out FILE.md]

Needs /usr/sbin/sshd (or FLEETBENCH_SSHD). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.harness import ROOT, publish
from benchmarks.harness.coldrun import cli
from benchmarks.harness.polling import wait_until
from benchmarks.harness.sshfleet import start_fleet


def sweep_file(path: Path) -> Path:
    doc = {
        "name": "liveness",
        "backends": ["torch-bf16"],
        "shapes": [{"m": [16 * (i + 1) for i in range(8)], "n": 64, "k": 128, "label": "live"}],
        "timing": {
            "budget_s": 0.3,
            "warmup_ms": 1,
            "min_samples": 3,
            "max_samples": 100000,
            "target_rel_ci": 1e-9,
            "rounds": 1,
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def lines_of(path: Path) -> set[str]:
    return {line for line in path.read_text().splitlines() if '"kind":"case"' in line} if path.exists() else set()


def one(fleet, work: Path, fault: str, victim: str) -> dict:
    runs = work / f"runs-{fault}-{time.time_ns()}"
    inv = fleet.inventory(work / "hosts.yaml")
    doc = yaml.safe_load(inv.read_text())
    del doc["defaults"]["timeout"]
    inv.write_text(yaml.safe_dump(doc))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # Popen, not the harness's `cli`: the host is frozen or killed while the run goes on.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(sweep_file(work / "s.yaml")),
            "-i",
            str(inv),
            "--runs-dir",
            str(runs),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    host = fleet.host(victim)
    # Frozen right after its first case starts; killed once two cases have ended (lines to lose).
    mark, count = ('"event":"start"', 1) if fault == "frozen" else ('"event":"end"', 2)
    ready = lambda: any(p.read_text().count(mark) >= count for p in runs.glob(f"*/hosts/{victim}/attempt-1/log.txt"))  # noqa: E731
    assert wait_until(ready, 60), "the victim never got there"
    t_fault = time.time()
    host.freeze() if fault == "frozen" else host.kill()
    _, err = proc.communicate(timeout=600)
    t_return = time.time()
    run_dir = next(p for p in runs.iterdir() if p.is_dir())  # the runs folder also holds the history index
    outcome_file = run_dir / "hosts" / victim / "attempt-1" / "outcome.json"
    outcome = json.loads(outcome_file.read_text())
    healthy = {
        json.loads(p.read_text())["outcome"]
        for p in run_dir.glob("hosts/*/attempt-1/outcome.json")
        if p.parent.parent.name != victim
    }
    host.thaw() if fault == "frozen" else host.restart()
    rerun = cli("rerun", run_dir, "--failed", "--resume", env={"PYTHONPATH": str(ROOT)})
    remote = lines_of(host.workdir / "runs" / run_dir.name / f"{victim}.attempt-1" / "results.jsonl")
    local = set().union(*(lines_of(p) for p in run_dir.glob(f"hosts/{victim}/attempt-*/results.jsonl")))
    return {
        "fault": fault,
        "outcome": outcome["outcome"],
        "to_outcome_s": outcome_file.stat().st_mtime - t_fault,
        "to_return_s": t_return - t_fault,
        "healthy": ",".join(sorted(healthy)),
        "exit": proc.returncode,
        "rerun_exit": rerun.returncode,
        "lines_on_host": len(remote),
        "lost": len(remote - local),
        "error": outcome["error"][:90],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleetbench-liveness-"))
    fleet = start_fleet(work / "fleet", 4)
    rows = []
    try:
        for rep in range(args.reps):
            for fault in ("frozen", "killed"):
                rows.append(one(fleet, work, fault, f"ssh{(rep + (fault == 'killed')) % 4}"))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        fleet.stop()
    lines = [
        "| fault | outcome | fault → outcome s | fault → command returns s | healthy hosts | exit | rerun exit | "
        "lines on the host | lines lost | error |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r['fault']} | {r['outcome']} | {r['to_outcome_s']:.1f} | {r['to_return_s']:.1f} | {r['healthy']} | "
        f"{r['exit']} | {r['rerun_exit']} | {r['lines_on_host']} | {r['lost']} | {r['error']} |"
        for r in rows
    ]
    for fault in ("frozen", "killed"):
        xs = [r["to_outcome_s"] for r in rows if r["fault"] == fault]
        lines.append(f"\n{fault}: fault → outcome median {statistics.median(xs):.1f} s over {len(xs)}")
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
