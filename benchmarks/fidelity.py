#!/usr/bin/env python3
"""Timing fidelity on a GPU: does the worker's timing agree with an independent harness?

For every seed shape (GLM-5 TP8) and every baseline that runs on this GPU, in one process:
  ours(hot)   the worker's CUDA-graph timing, hot L2 (what triton's do_bench_cudagraph measures)
  triton      triton.testing.do_bench_cudagraph on the very same callable and inputs
  ours(cold)  the worker's default: graph replay with rotating input sets (cold L2)
  events      one CUDA event pair per call (the naive method, launch-bound for small M)
then the whole seed sweep through the real worker CLI (`python -m worker supervise`), timed.

    python benchmarks/fidelity.py --out DIR      # prints a Markdown table, writes DIR/fidelity.{md,json}

Needs a CUDA GPU, torch and triton; FlashInfer (fp8 via cublas) is used when importable.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINES = ["torch-bf16", "torch-fp8", "flashinfer-fp8-cublas"]
FP4 = ["flashinfer-fp4-cutlass", "flashinfer-fp4-cudnn", "flashinfer-fp4-trtllm", "flashinfer-fp4-auto",
       "flashinfer-fp4-b12x", "sgl-fp4-cutlass", "torch-nvfp4"]


def seed_shapes():
    from orchestrator.sweep import Sweep

    sweep = Sweep(name="glm5", backends=["torch-bf16"], shapes=[{"preset": "glm5-tp8"}])
    return [(c.label, c.m, c.n, c.k) for c in sweep.cases()]


def compare(shapes, backends):
    import torch
    import triton.testing

    from worker.backends import CATALOG, availability_problem
    from worker.runner import CaseRunner
    from worker.schema import CaseSpec, TimingOptions

    runner = CaseRunner("cuda")
    rows = []
    for backend in backends:
        spec = CATALOG[backend]
        if availability_problem(spec):
            print(f"skip {backend}: {availability_problem(spec)}", flush=True)
            continue
        module = __import__(f"worker.backends.{spec.module}", fromlist=["prepare"])
        for label, m, n, k in shapes:
            hot = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(l2="hot", budget_s=1.0))
            cold = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(l2="cold", budget_s=1.0))
            events = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(mode="events", l2="hot", budget_s=1.0))
            r_hot = runner.run(hot)
            # The independent harness times the same prepared callable on the same inputs.
            a, b = CaseRunner._inputs(hot, 0, "cuda")
            fn = module.prepare(spec, [(a, b)], torch.bfloat16)
            fn(0)
            torch.cuda.synchronize()
            # triton's default rep (20 ms of back-to-back calls per replay) and a 100 ms variant: long
            # replays run the GPU at sustained power, which can lower its clock.
            t_triton_ms = triton.testing.do_bench_cudagraph(lambda f=fn: f(0), return_mode="median")
            t_triton100_ms = triton.testing.do_bench_cudagraph(lambda f=fn: f(0), rep=100, return_mode="median")
            r_hot2 = runner.run(hot)  # again after triton: drift shows up as a gap between the two
            r_cold = runner.run(cold)
            r_ev = runner.run(events)
            ours = [r.timing.median_us for r in (r_hot, r_hot2) if r.timing]
            row = dict(backend=backend, label=label, m=m, n=n, k=k, status=r_hot.status, reason=r_hot.reason,
                       ours_hot_us=ours[0] if ours else None, ours_hot_again_us=ours[1] if len(ours) > 1 else None,
                       triton_us=t_triton_ms * 1e3, triton_rep100_us=t_triton100_ms * 1e3,
                       ours_cold_us=r_cold.timing.median_us if r_cold.timing else None,
                       events_us=r_ev.timing.median_us if r_ev.timing else None,
                       rel_err=r_hot.correctness.rel_err if r_hot.correctness else None,
                       verdict=r_hot.correctness.verdict if r_hot.correctness else None)
            if ours:
                row["ratio_vs_triton"] = (sum(ours) / len(ours)) / row["triton_us"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            del fn, a, b
    return rows


def full_sweep(out: Path, backends):
    """The seed sweep through the worker CLI, as a host runs it; returns wall seconds and statuses."""
    from orchestrator.sweep import Sweep
    from worker.schema import WorkerParams

    sweep = Sweep(name="glm5-tp8", backends=backends, shapes=[{"preset": "glm5-tp8"}])
    params = WorkerParams(run_id="fidelity", host="device", cases=sweep.cases(), device="cuda")
    p = out / "params.json"
    p.write_text(params.model_dump_json())
    results = out / "results.jsonl"
    results.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "worker", "supervise", "--params", str(p), "--results", str(results)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in results.read_text().splitlines()]
    cases = [r for r in records if r["kind"] == "case"]
    gpu_s = sum(r["duration_s"] for r in cases)
    return wall, gpu_s, records


def markdown(rows, facts, wall, case_s, records) -> str:
    lines = [f"GPU: {facts.get('gpu_name')} (CC {facts.get('compute_capability')}), driver {facts.get('driver')}, "
             f"CUDA {facts.get('cuda')}, torch {facts.get('torch')}, triton {facts.get('triton')}, "
             f"flashinfer {facts.get('flashinfer')}", "",
             "| backend | M | N | K | ours hot µs (before / after triton) | triton µs (rep 20) | ours/triton | triton µs (rep 100) | ours cold µs | events µs | rel_err | check |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        f = lambda v, p=2: "" if v is None else f"{v:.{p}f}"  # noqa: E731
        lines.append(f"| {r['backend']} | {r['m']} | {r['n']} | {r['k']} | {f(r['ours_hot_us'])} / {f(r['ours_hot_again_us'])} | "
                     f"{f(r['triton_us'])} | {f(r.get('ratio_vs_triton'), 3)} | {f(r['triton_rep100_us'])} | {f(r['ours_cold_us'])} | "
                     f"{f(r['events_us'])} | {'' if r['rel_err'] is None else format(r['rel_err'], '.2e')} | {r['verdict'] or r['status']} |")
    cases = [r for r in records if r["kind"] == "case"]
    by_status: dict = {}
    for r in cases:
        by_status.setdefault(r["status"], []).append(r)
    ratios = [r["ratio_vs_triton"] for r in rows if r.get("ratio_vs_triton")]
    if ratios:
        within = sum(1 for x in ratios if abs(x - 1) <= 0.05)
        lines += ["", f"ours/triton: {within} of {len(ratios)} within ±5%; range {min(ratios):.3f} .. {max(ratios):.3f}"]
    lines += ["", f"Seed sweep through `python -m worker supervise`: {len(cases)} cases, wall {wall:.1f} s "
              f"(process start, imports and JIT included), {case_s:.1f} s inside cases.", ""]
    for status, recs in sorted(by_status.items()):
        reasons = sorted({f"{r['case']['backend']}: {r['reason']}" for r in recs if r["reason"]})
        lines.append(f"- {status}: {len(recs)}" + ("".join(f"\n  - {x}" for x in reasons[:12]) if reasons else ""))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("fidelity-out"))
    ap.add_argument("--backends", default=",".join(BASELINES))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from worker.env import collect_facts, detect_device

    facts = collect_facts(detect_device("cuda")).model_dump()
    backends = [b for b in args.backends.split(",") if b]
    rows = compare(seed_shapes(), backends)
    wall, case_s, records = full_sweep(args.out, backends + ["reference-nvfp4"] + FP4)
    md = markdown(rows, facts, wall, case_s, records)
    (args.out / "fidelity.md").write_text(md)
    (args.out / "fidelity.json").write_text(json.dumps({"facts": facts, "rows": rows, "sweep_wall_s": wall,
                                                        "sweep_case_s": case_s}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
