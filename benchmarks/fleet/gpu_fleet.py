#!/usr/bin/env python3
"""A fleet on one GPU machine: N sshd "hosts" on loopback, each a real SSH login, running one sweep.

Each host is pinned to a GPU by CUDA_VISIBLE_DEVICES (host i -> GPU i % gpus). With fewer GPUs than
hosts they share GPUs, and the host-side GPU lock serializes them. Mid-run, one host is killed
(listener and sessions); `fleetbench rerun --failed` completes it.

    FLEETBENCH_SSHD=/path/sshd FLEETBENCH_SSH_KEYGEN=/path/ssh-keygen \\
      python -m benchmarks.fleet.gpu_fleet --hosts 2 --gpus 1 --sweep sweeps/glm5_tp8.yaml --out DIR

Writes DIR/summary.md (tables and timings), DIR/controller.log, DIR/merged.csv and the run's own output
(DIR/run.stdout.txt, DIR/run.stderr.txt).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.harness.coldrun import cli
from benchmarks.harness.sshfleet import start_fleet


def logged_cli(args, log) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = cli(*args)
    wall = time.perf_counter() - t0
    log.write(f"$ fleetbench {' '.join(map(str, args))}\n(exit {proc.returncode}, {wall:.1f} s)\n{proc.stderr}\n")
    log.flush()
    return proc.returncode, proc.stdout, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--sweep", default="sweeps/glm5_tp8.yaml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--env", action="append", default=[], help="K=V for every host (e.g. PYTHONPATH=/tmp/site)")
    ap.add_argument("--kill-after-cases", type=int, default=3, help="kill the last host once it finished this many")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/fleetbench-gpu-fleet")
    base = work / f"f{int(time.time())}"
    fleet = start_fleet(base, args.hosts)
    env = dict(kv.split("=", 1) for kv in args.env)
    inv = fleet.inventory(base / "hosts.yaml", env=env)
    # pin each host to one GPU
    import yaml

    doc = yaml.safe_load(inv.read_text())
    for i, h in enumerate(doc["hosts"]):
        h["env"] = {**env, "CUDA_VISIBLE_DEVICES": str(i % args.gpus)}
        h["timeout"] = 900
    inv.write_text(yaml.safe_dump(doc))
    runs = base / "runs"  # fresh per invocation: the kill trigger reads this run's logs only
    log = open(args.out / "controller.log", "w")
    md = [f"# {args.hosts} sshd hosts on {args.gpus} GPU(s), sweep {args.sweep}", ""]
    try:
        victim = fleet.hosts[-1]
        # Started by Popen, not the harness's `cli`: the victim is killed while the run goes on.
        # The run's output goes to files, not pipes: nobody reads a pipe while the loop below watches the
        # victim's log, and a child whose output outgrows the pipe's buffer would block on it forever.
        out_path, err_path = args.out / "run.stdout.txt", args.out / "run.stderr.txt"
        with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "orchestrator.cli",
                    "run",
                    args.sweep,
                    "-i",
                    inv,
                    "--runs-dir",
                    runs,
                    "--format",
                    "md",
                ],
                cwd=ROOT,
                stdout=out_file,
                stderr=err_file,
                text=True,
            )
            t0 = time.perf_counter()
            killed_at = None
            while proc.poll() is None:
                logs = list(runs.glob(f"*/hosts/{victim.name}/attempt-1/log.txt"))
                if killed_at is None and logs and logs[0].read_text().count('"event":"end"') >= args.kill_after_cases:
                    victim.kill()
                    killed_at = time.perf_counter() - t0
                time.sleep(0.2)
        wall = time.perf_counter() - t0
        err = err_path.read_text()
        log.write(f"$ fleetbench run (exit {proc.returncode}, {wall:.1f} s)\n{err}\n")
        md += [
            f"## run: exit {proc.returncode}, {wall:.1f} s wall; {victim.name} killed at "
            f"{'%.1f s' % killed_at if killed_at else 'never'}",
            "",
            "```",
            err.strip(),
            "```",
            "",
        ]
        victim.restart()
        code, out2, wall2 = logged_cli(
            ["rerun", "latest", "--failed", "-i", inv, "--runs-dir", runs, "--format", "md"], log
        )
        md += [f"## rerun --failed: exit {code}, {wall2:.1f} s wall", "", out2]
        code, out3, _ = logged_cli(["show", "latest", "--runs-dir", runs, "--format", "csv"], log)
        (args.out / "merged.csv").write_text(out3)
    finally:
        fleet.stop()
        (args.out / "summary.md").write_text("\n".join(md) + "\n")
        log.close()
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
