#!/usr/bin/env python3
"""Does CUPTI timing (worker/measure/cupti.py) agree with event-timed graph replay, and how does kineto report
the kernels of a CUDA graph (issue 30)?

For each seed case of `--backends` that runs on this GPU, in one process, as the worker does: prepare,
time it (worker/measure/timing.py Timer.time_cuda: graph replay, cold-L2 rotation, settled), capture the same graph
of `calls_per_sample` calls, settle again, and read that graph's kernels with kernel_samples_us. Also, per
case, one eager call under the profiler: its kernels must be the graph's kernels of one call.

What kineto gave is printed first (for the first case): its activity types, whether each activity names
the correlation id of a cudaGraphLaunch, and how long starting the profiler took (the first start
initialises CUPTI); then one row per case: replay time per call (events), kernel time per call (CUPTI),
their ratio, first-start-to-last-end per call, activities per call and how replays were told apart.

    python -m benchmarks.fidelity.cupti_check [--backends torch-bf16,torch-fp8,...] [--replays 20] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT

DEFAULT_BACKENDS = "torch-bf16,torch-fp8,flashinfer-fp8-cublas,reference-nvfp4"


def seed_cases(backends: list[str]):
    from orchestrator.config.sweep import load_sweep

    sweep = load_sweep(ROOT / "sweeps" / "glm5_tp8.yaml")
    sweep = sweep.model_copy(update={"backends": backends, "timing": sweep.timing.model_copy(update={"rounds": 1})})
    return sweep.cases()


def runnable(runner, case) -> str:
    from worker.backends import availability_problem
    from worker.contract.catalog import support_problem
    from worker.sweep.runner import _spec_of

    spec = _spec_of(case)
    return (
        support_problem(spec, case.m, case.n, case.k, runner.device.compute_capability)
        or availability_problem(spec)
        or ""
    )


def kineto_report(replay, calls: int) -> list[str]:
    """How kineto reports one traced replay of a graph: what a reader needs to trust worker/measure/cupti.py."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.__enter__()
    started_s = time.perf_counter() - t0
    replay()
    torch.cuda.synchronize()
    prof.__exit__(None, None, None)
    events = prof.profiler.kineto_results.events()
    kinds = collections.Counter(
        (str(e.device_type()).split(".")[-1], e.activity_type() if hasattr(e, "activity_type") else "?") for e in events
    )
    launches = [e for e in events if "GraphLaunch" in e.name()]
    device = [e for e in events if e.device_type() == DeviceType.CUDA]
    launch_ids = {e.correlation_id() for e in launches}
    named = sum(e.correlation_id() in launch_ids for e in device)
    lines = [
        f"- profiler start: {started_s * 1e3:.1f} ms (this process's first: CUPTI initialised here)",
        f"- events of one replay of {calls} calls, by (device, kineto activity type): "
        + ", ".join(f"{d}/{k}: {n}" for (d, k), n in sorted(kinds.items())),
        f"- graph launches seen: {len(launches)} ({', '.join(sorted({e.name() for e in launches})) or 'none'}); "
        f"device activities naming a launch's correlation id: {named} of {len(device)}",
        f"- linked correlation ids of the device activities: {sorted({e.linked_correlation_id() for e in device})[:5]}",
    ]
    return lines


def eager_kernels(fn) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from worker.measure.cupti import read_trace

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(0)
        torch.cuda.synchronize()
    activities, _ = read_trace(prof.profiler.kineto_results.events())
    return [a.name for a in sorted(activities, key=lambda a: a.start_ns)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default=DEFAULT_BACKENDS)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    import torch

    from worker.measure import cupti, timing
    from worker.sweep.runner import CaseRunner, _spec_of

    problem = cupti.available()
    if problem:
        print(f"CUPTI timing cannot run here: {problem}")
        return 1
    cupti.ask_for_teardown()  # before this script's own first trace (kineto_report), as the worker's first
    runner = CaseRunner("cuda")
    lines = [
        f"# CUPTI kernel time against event-timed graph replay ({runner.device.name}, torch {torch.__version__})",
        "",
        f"Reproduce: `python -m benchmarks.fidelity.cupti_check --backends {args.backends} --replays {args.replays}`",
        "",
    ]
    rows, skipped, first = [], [], True
    for case in seed_cases(args.backends.split(",")):
        why = runnable(runner, case)
        if why:
            skipped.append(f"{case.backend} {case.m}x{case.n}x{case.k}: {why}")
            continue
        fn, sets, n_sets = runner._prepare(case, _spec_of(case))
        stats = runner.timer.time_cuda(fn, n_sets, case.timing).stats
        cps = stats.calls_per_sample
        graph = timing._capture(fn, cps, n_sets, runner.timer.capture_stream())
        graph.replay()
        torch.cuda.synchronize()
        if first:
            lines += ["## How kineto reports the kernels of a CUDA graph", ""] + kineto_report(graph.replay, cps) + [""]
            first = False
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def replay_us() -> float:
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / cps

        timing.settle(replay_us, cps, case.timing.settle_ms)
        eager = eager_kernels(fn)
        try:
            got = cupti.kernel_samples_us(graph.replay, cps, args.replays)
            kernels = statistics.median(got.per_call_us)
            span = statistics.median(got.span_us)
            same = (
                "yes"
                if collections.Counter(got.kernels) == collections.Counter(eager)
                else f"no: eager {len(eager)}, graph {len(got.kernels)}"
            )
            rows.append(
                f"| {case.backend} | {case.m}x{case.n}x{case.k} | {n_sets} | {cps} | {stats.median_us:.2f} | "
                f"{kernels:.2f} | {kernels / stats.median_us:.3f} | {span:.2f} | {len(got.kernels)} | "
                f"{got.split_by} | {same} | {min(got.per_call_us):.2f}-{max(got.per_call_us):.2f} |"
            )
        except cupti.CuptiError as exc:
            rows.append(
                f"| {case.backend} | {case.m}x{case.n}x{case.k} | {n_sets} | {cps} | {stats.median_us:.2f} | "
                f"| | | | | | CuptiError: {exc} |"
            )
        print(rows[-1], flush=True)
        del fn, sets
        graph = None  # freed before the next case (replay_us above still names it)
        torch.cuda.empty_cache()
    lines += [
        "## Per case",
        "",
        "| backend | shape | input sets | calls per replay | replay µs per call (events) | CUPTI kernels µs per call "
        "| kernels / replay | span µs per call | activities per call | replays told apart by | same kernels as an "
        "eager call | CUPTI min-max over replays |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ] + rows
    if skipped:
        lines += ["", "Not run here: " + "; ".join(skipped)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
