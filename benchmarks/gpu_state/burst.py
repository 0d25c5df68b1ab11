#!/usr/bin/env python3
"""Burst and settled numbers of the same cases, with the SM clock each was sampled at (issue 30).

In one process, for each case: the worker's settled timing (the default: the case's own sustained
clock and power state) and its burst timing (`timing.state: burst`: idle `cooldown_ms`, then at most
40 ms of samples, as FlashInfer's benchmarks cool the GPU between cases), `--rounds` of each,
alternating. The SM clock is NVML's reading when the samples began and when they ended.

    python -m benchmarks.gpu_state.burst [--shapes 256x2048x6144,512x2048x6144,1024x2048x6144]
                               [--backends torch-bf16,torch-fp8] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="256x2048x6144,512x2048x6144,1024x2048x6144")
    ap.add_argument("--backends", default="torch-bf16,torch-fp8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    from worker.contract.schema import CaseSpec, TimingOptions
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cuda")
    lines = [
        "| backend | shape | settled µs | SM MHz (start → end) | burst µs | SM MHz (start → end) | burst / settled |",
        "|---|---|---:|---|---:|---|---:|",
    ]
    for backend in args.backends.split(","):
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in shape.split("x"))
            got: dict[str, list] = {"settled": [], "burst": []}
            for _ in range(args.rounds):
                for state in ("settled", "burst"):
                    case = CaseSpec(
                        backend=backend, m=m, n=n, k=k, timing=TimingOptions(rounds=1, budget_s=0.3, state=state)
                    )
                    rec = runner.run(case)
                    if rec.status != "ok":
                        print(f"{backend} {shape} {state}: {rec.status} {rec.reason}", file=sys.stderr)
                        continue
                    h = rec.health
                    clocks = (h.before.sm_clock_mhz, h.after.sm_clock_mhz) if h else (None, None)
                    got[state].append((rec.timing.median_us, clocks))
            if not got["settled"] or not got["burst"]:
                continue
            s_us = statistics.median(v[0] for v in got["settled"])
            b_us = statistics.median(v[0] for v in got["burst"])

            def clocks(vals):
                return ", ".join(f"{a} → {b}" for _, (a, b) in vals)

            lines.append(
                f"| {backend} | {shape} | {s_us:.2f} | {clocks(got['settled'])} | {b_us:.2f} | "
                f"{clocks(got['burst'])} | {b_us / s_us:.3f} |"
            )
            print(lines[-1], flush=True)
    md = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
