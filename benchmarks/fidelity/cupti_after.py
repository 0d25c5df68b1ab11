#!/usr/bin/env python3
"""Does reading kernels with CUPTI slow what a process times afterwards (issue 30)?

Kineto keeps CUPTI attached after a torch.profiler session unless TEARDOWN_CUPTI=1 (pytorch#146604).
worker/measure/cupti.py asks for the teardown; this measures why it must. Per variant, one fresh process, as
the worker times (worker/measure/timing.py Timer.time_cuda: graph replay, cold-L2 rotation, settled):

    before     each case timed, nothing traced yet in the process
    after 1    each case timed again, after one CUPTI trace of the first case (cupti.kernel_samples_us)
    after 2    the same after a second trace: a re-initialised CUPTI must leave again

Variants: `attached` (TEARDOWN_CUPTI=0: kineto's default, what a plain torch.profiler user gets) and
`teardown` (worker/measure/cupti.py as it is: TEARDOWN_CUPTI=1 where the CUDA version allows it). Each trace's
wall time is printed too: a torn-down CUPTI is initialised again by the next trace.

    python -m benchmarks.fidelity.cupti_after [--cases torch-fp8:16x768x6144,...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT

DEFAULT_CASES = (
    "torch-fp8:16x768x6144,torch-bf16:16x2048x6144,flashinfer-fp8-cublas:32x2048x6144,"
    "torch-bf16:256x2048x6144,torch-bf16:1024x2048x6144"
)
VARIANTS = {"attached": "0", "teardown": None}


def cases(spec: str):
    from orchestrator.config.sweep import load_sweep

    wanted = []
    for item in spec.split(","):
        backend, shape = item.split(":")
        m, n, k = (int(x) for x in shape.split("x"))
        wanted.append((backend, m, n, k))
    sweep = load_sweep(ROOT / "sweeps" / "glm5_tp8.yaml")
    sweep = sweep.model_copy(
        update={"backends": sorted({w[0] for w in wanted}), "timing": sweep.timing.model_copy(update={"rounds": 1})}
    )
    by_key = {(c.backend, c.m, c.n, c.k): c for c in sweep.cases()}
    missing = [w for w in wanted if w not in by_key]
    if missing:
        raise SystemExit(f"not cases of sweeps/glm5_tp8.yaml: {missing}")
    return [by_key[w] for w in wanted]


def child(spec: str) -> None:
    """One process: times before and after each trace, as JSON on stdout."""
    import torch

    from worker.measure import cupti, timing
    from worker.sweep.runner import CaseRunner, _spec_of

    runner = CaseRunner("cuda")
    prepared = []
    for case in cases(spec):
        fn, sets, n_sets = runner._prepare(case, _spec_of(case))
        prepared.append((case, fn, sets, n_sets))

    def time_all() -> list[float]:
        return [runner.timer.time_cuda(fn, n_sets, case.timing).stats.median_us for case, fn, _, n_sets in prepared]

    out = {"teardown_env": None, "phases": {}, "trace_s": [], "notes": []}
    out["phases"]["before"] = time_all()
    case, fn, _, n_sets = prepared[0]
    cps = runner.timer.time_cuda(fn, n_sets, case.timing).stats.calls_per_sample
    graph = timing._capture(fn, cps, n_sets, runner.timer.capture_stream())
    for i in (1, 2):
        t0 = time.perf_counter()
        got = cupti.kernel_samples_us(graph.replay, cps, 10)
        torch.cuda.synchronize()
        out["trace_s"].append(round(time.perf_counter() - t0, 3))
        out["notes"] += got.notes
        out["teardown_env"] = os.environ.get("TEARDOWN_CUPTI")
        out["phases"][f"after {i}"] = time_all()
    out["cases"] = [f"{c.backend} {c.m}x{c.n}x{c.k}" for c, *_ in prepared]
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES, help="backend:MxNxK of the seed sweep, comma-separated")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    if args.child:
        child(args.cases)
        return 0
    import torch

    from worker.measure import cupti

    problem = cupti.available()
    if problem:
        print(f"CUPTI cannot run here: {problem}")
        return 1
    lines = [
        f"# Graph replay before and after a CUPTI trace in the same process ({torch.cuda.get_device_name()}, "
        f"torch {torch.__version__}, CUDA {torch.version.cuda})",
        "",
        f"Reproduce: `python -m benchmarks.fidelity.cupti_after --cases {args.cases}`",
        "",
    ]
    for variant, value in VARIANTS.items():
        env = dict(os.environ)
        env.pop("TEARDOWN_CUPTI", None)
        if value is not None:
            env["TEARDOWN_CUPTI"] = value
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.fidelity.cupti_after", "--child", "--cases", args.cases],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if proc.returncode:
            lines += [
                f"## {variant}: the process failed (exit {proc.returncode})",
                "",
                "```",
                proc.stderr[-2000:],
                "```",
                "",
            ]
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        before = got["phases"]["before"]
        lines += [
            f"## {variant} (TEARDOWN_CUPTI={got['teardown_env']} when the traces ended)",
            "",
            f"Trace wall time: {', '.join(f'{s:.2f} s' for s in got['trace_s'])}"
            + (f". Notes: {'; '.join(dict.fromkeys(got['notes']))}" if got["notes"] else ""),
            "",
            "| case | before µs | after 1 µs | after 1 / before | after 2 µs | after 2 / before |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for i, name in enumerate(got["cases"]):
            a1, a2 = got["phases"]["after 1"][i], got["phases"]["after 2"][i]
            lines.append(
                f"| {name} | {before[i]:.3f} | {a1:.3f} | {a1 / before[i]:.3f} | {a2:.3f} | {a2 / before[i]:.3f} |"
            )
        lines.append("")
        print("\n".join(lines[-len(got["cases"]) - 6 :]), flush=True)
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
