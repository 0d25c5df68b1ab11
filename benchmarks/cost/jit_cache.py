#!/usr/bin/env python3
"""Does a sweep pay FlashInfer's JIT build again when the same host is reached from a shell one time
and through SSH the next (issue 21)? One machine, two inventory entries for it: `shell` (transport
local: the caller's environment) and `ssh0` (a real sshd on loopback: an SSH session's environment).
The same one-case FlashInfer sweep runs shell, shell, ssh0, ssh0, shell; each run's wall time and the case's
own duration (its warm-up is where a JIT build lands) are printed, with the CUDA toolkit path that
FlashInfer derives in each environment (the cause of the rebuilds before the worker pinned CUDA_HOME).

    FLEETBENCH_SSHD=/path/sshd FLEETBENCH_SSH_KEYGEN=/path/ssh-keygen \\
      python -m benchmarks.cost.jit_cache --out DIR [--env PYTHONPATH=/tmp/site]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from benchmarks.harness.coldrun import cold_run
from benchmarks.harness.sshfleet import start_fleet

SWEEP = {
    "name": "jit-cache",
    "backends": ["flashinfer-fp8-cublas"],
    "shapes": [{"m": 16, "n": 2048, "k": 6144}],
    "timing": {"rounds": 1, "budget_s": 0.2},
}
PROBE = "from flashinfer.jit.cpp_ext import get_cuda_path; print(get_cuda_path())"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--env", action="append", default=[], help="K=V for the ssh host (e.g. PYTHONPATH=/tmp/site)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = Path(f"/tmp/fleetbench-jit-{int(time.time())}")
    fleet = start_fleet(base, 1)
    env = dict(kv.split("=", 1) for kv in args.env)
    inv = fleet.inventory(base / "hosts.yaml", env=env)
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][0]["env"] = {**doc["defaults"]["env"], **env}
    doc["hosts"].append({"name": "shell", "transport": "local", "workdir": str(base / "shell-work")})
    inv.write_text(yaml.safe_dump(doc))
    sweep = base / "jit.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    lines = ["| environment | FlashInfer's CUDA path |", "|---|---|"]
    shell_path = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stdout.strip()
    ssh_env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), **env}
    ssh_path = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=ssh_env).stdout.strip()
    lines += [
        f"| this shell (PATH={os.environ.get('PATH')}) | {shell_path} |",
        f"| an SSH session's minimal PATH (/usr/bin:/bin) | {ssh_path} |",
        "",
    ]
    lines += [
        "| # | host | exit | run wall s | case duration s | status | what the worker set |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    # Where FlashInfer keeps its JIT modules; each run's rewritten build files are kept so consecutive
    # runs can be compared line by line (what in the environment reached the build file).
    cache = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", Path.home())) / ".cache" / "flashinfer"
    build_env = {
        k: v
        for k, v in os.environ.items()
        if k in ("CC", "CXX", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS")
        or k.startswith(("FLASHINFER_", "NVCC"))
    }
    lines.insert(0, f"This shell's build-relevant environment: {build_env or 'none'}\n")
    kept: list[dict[str, str]] = []
    runs = base / "runs"
    try:
        for i, host in enumerate(["shell", "shell", "ssh0", "ssh0", "shell"], 1):
            started = time.time()
            run = cold_run(sweep, inv, runs, extra=("-l", host))
            found = run.run_dir.glob(f"hosts/{host}/**/results.jsonl") if run.run_dir else []
            records = [json.loads(line) for f in found for line in f.read_text().splitlines()]
            facts = next((r for r in records if r.get("kind") == "facts"), {})
            row = next((r for r in records if r.get("kind") == "case"), {})
            note = "; ".join(n for n in facts.get("notes", []) if n.startswith("the worker set"))
            logs = run.run_dir.glob(f"hosts/{host}/**/log.txt") if run.run_dir else []
            log = "".join(f.read_text(errors="replace") for f in logs)
            note += f" [log: {log.count('Building')} 'Building' lines]"
            lines.append(
                f"| {i} | {host} | {run.returncode} | {run.wall_s:.1f} | {row.get('duration_s', '')} | "
                f"{row.get('status', run.stderr.strip()[-200:])} {row.get('reason', '')[:80]} | {note} |"
            )
            print(lines[-1], flush=True)
            kept.append(
                {
                    str(f.relative_to(cache)): f.read_text(errors="replace")
                    for f in cache.rglob("build.ninja")
                    if f.stat().st_mtime >= started
                }
            )
    finally:
        fleet.stop()
    lines += ["", "Build files FlashInfer rewrote, and how they differ from the previous run's:"]
    for i, files in enumerate(kept, 1):
        for name, text in sorted(files.items()):
            (args.out / f"run{i}-{name.replace('/', '_')}").write_text(text)
            before = next((k[name] for k in reversed(kept[: i - 1]) if name in k), None)
            changed = (
                []
                if before is None
                else list(difflib.unified_diff(before.splitlines(), text.splitlines(), lineterm="", n=0))
            )
            lines.append(
                f"- run {i}: {name}: "
                + ("first seen" if before is None else f"{len(changed)} diff lines" if changed else "unchanged")
            )
            lines += [f"      {d[:300]}" for d in changed if d[:1] in "+-" and not d.startswith(("+++", "---"))][:12]
    md = "\n".join(lines) + "\n"
    (args.out / "jit_cache.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
