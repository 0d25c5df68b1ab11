#!/usr/bin/env python3
"""Why does the first case of a worker process read low (issue 21)? One case, timed by the worker's own
code (CaseRunner: inputs, cold-L2 rotation, CUDA-graph replay), in several conditions within fresh
processes:
  first        the first timing in the process (fresh CUDA context, fresh allocator segments)
  again        right after, new inputs from the caching allocator's blocks
  empty-cache  after torch.cuda.empty_cache(): fresh cudaMalloc segments again, warm context
  reused-big   after a large block was allocated and freed (inputs carved from recycled memory)
  other-first  another shape first, then this case (is it "first in process" or "first of this shape"?)
Each condition prints the median of its samples (µs); several processes repeat the whole sequence.
With --kernels, one process lists the GPU kernels (torch.profiler) that the first and the second timing
ran, with their mean duration.

    python benchmarks/first_case.py [--backend torch-bf16 --m 16 --n 2048 --k 6144] [--procs 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one_process(backend: str, m: int, n: int, k: int, order: str) -> dict:
    import torch

    from worker.backends import CATALOG
    from worker.runner import CaseRunner
    from worker.schema import CaseSpec, TimingOptions

    runner = CaseRunner("cuda")
    opts = TimingOptions(budget_s=0.3, rounds=1)

    def timed(case: CaseSpec) -> float:
        fn, sets, n_sets = runner._prepare(case, CATALOG[case.backend])
        stats, _ = runner._time(case, fn, n_sets)
        del fn, sets
        return round(stats.median_us, 3)

    case = CaseSpec(backend=backend, m=m, n=n, k=k, timing=opts)
    other = CaseSpec(backend=backend, m=1024, n=n, k=k, timing=opts)
    out = {}
    if order == "other-first":
        out["other (1024) first"] = timed(other)
        out["other-first"] = timed(case)
        return out
    out["first"] = timed(case)
    out["again"] = timed(case)
    torch.cuda.empty_cache()
    out["empty-cache"] = timed(case)
    big = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    del big
    out["reused-big"] = timed(case)
    out["again-2"] = timed(case)
    return out


def kernels(backend: str, m: int, n: int, k: int) -> None:
    """The kernels each of two timings in one fresh process ran (name, count, mean µs)."""
    from collections import defaultdict

    import torch
    from torch.profiler import ProfilerActivity, profile

    from worker.backends import CATALOG
    from worker.runner import CaseRunner
    from worker.schema import CaseSpec, TimingOptions

    runner = CaseRunner("cuda")
    case = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(budget_s=0.1, rounds=1))
    for label in ("first", "second"):
        fn, sets, n_sets = runner._prepare(case, CATALOG[case.backend])
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            stats, _ = runner._time(case, fn, n_sets)
            torch.cuda.synchronize()
        seen: dict = defaultdict(list)
        for ev in prof.events():
            if ev.device_type.name == "CUDA":
                seen[ev.name].append(ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total)
        print(f"{label}: median {stats.median_us:.2f} us")
        for name, times in sorted(seen.items(), key=lambda kv: -len(kv[1]))[:4]:
            print(f"  {len(times):6d} x {statistics.mean(times):8.2f} us  {name[:110]}")
        del fn, sets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="torch-bf16")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=6144)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--child", choices=["plain", "other-first"])
    ap.add_argument("--kernels", action="store_true", help="list the kernels of a first and a second timing")
    args = ap.parse_args()
    if args.kernels:
        kernels(args.backend, args.m, args.n, args.k)
        return 0
    if args.child:
        print(json.dumps(one_process(args.backend, args.m, args.n, args.k, args.child)))
        return 0
    rows: dict[str, list[float]] = {}
    for order in ("plain", "other-first"):
        for _ in range(args.procs):
            proc = subprocess.run([sys.executable, __file__, "--child", order, "--backend", args.backend,
                                   "--m", str(args.m), "--n", str(args.n), "--k", str(args.k)],
                                  capture_output=True, text=True, check=True)
            for name, value in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                rows.setdefault(name, []).append(value)
    print(f"{args.backend} {args.m}x{args.n}x{args.k}, cold L2, graph replay; median µs per process\n")
    print("| condition | per process | median |")
    print("|---|---|---:|")
    for name, values in rows.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
