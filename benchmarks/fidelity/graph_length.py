#!/usr/bin/env python3
"""Why does Triton's do_bench_cudagraph read some power-limited GEMMs 3-8% below fleetbench with every
method matched (issue 30, benchmarks/RESULTS.md "fleetbench against FlashInfer's and Triton's timers")?

For each case, in one process, after the case is settled, timings of the same rotating calls (cold L2,
the case's own input sets), each reporting the median per-call time, the median of its first and of its
last 3 replays, the wall time its capture left the GPU idle right before its replays, and the median SM
clock NVML read while it ran:

    fleetbench      worker/measure/timing.py Timer.time_cuda, as a sweep times it (~2 ms graphs, back to back)
    long graph      fleetbench's events around one replay of a graph of ~20 ms of calls, 10 replays
                    (Triton's method, written out), on fleetbench's capture stream
    long, side      the same on a fresh side stream (where do_bench_cudagraph captures)
    replica         do_bench_cudagraph's steps written out (triton/testing.py, 3.6): on a fresh stream one
                    call, 5 event-timed eager calls to size the graph (n = 20 ms / their mean), a capture of
                    n calls through torch.cuda.graph's own stream, 10 event-timed replays
    replica, whole  the same with n rounded up to whole rotations of the input sets
    triton          triton.testing.do_bench_cudagraph(fn, return_mode="all")

The whole sequence runs `--repeat` times per case, so a difference can be told from the noise.

    python -m benchmarks.fidelity.graph_length [--cases torch-bf16:256x2048x6144,...] [--repeat 2] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.fidelity.cupti_after import cases  # the seed cases by backend:MxNxK

DEFAULT_CASES = (
    "torch-bf16:256x2048x6144,torch-fp8:512x2048x6144,torch-fp8:1024x2048x6144,"
    "flashinfer-fp8-cublas:512x2048x6144,torch-bf16:1024x2048x6144,torch-bf16:16x2048x6144"
)


class Timed:
    def __init__(self, per_replay_us: list[float], idle_ms: float, mhz):
        self.per_replay_us, self.idle_ms, self.mhz = per_replay_us, idle_ms, mhz

    @property
    def median(self) -> float:
        return statistics.median(self.per_replay_us)

    def part(self, which: slice) -> float:
        return statistics.median(self.per_replay_us[which])


def long_graph(fn, n_sets: int, per_call_us: float, stream, replays: int = 10, rep_ms: float = 20.0) -> tuple:
    """(per-replay µs per call, ms from the capture's start to the first replay)."""
    import time

    import torch

    from worker.measure import timing

    calls = max(n_sets, int(rep_ms * 1e3 / per_call_us))
    calls = -(-calls // n_sets) * n_sets
    with torch.cuda.stream(stream):
        t0 = time.perf_counter()
        graph = timing._capture(fn, calls, n_sets, stream)
        idle_ms = (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(replays):
            start.record(stream)
            graph.replay()
            end.record(stream)
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / calls)
    return out, idle_ms


def replica(call, n_sets: int, whole: bool, rep_ms: float = 20.0) -> tuple:
    """do_bench_cudagraph's steps, written out (module docstring): (per-replay µs per call, ms from the
    capture's start to the first replay)."""
    import time

    import torch

    from worker.tools.crosscheck import eager_ms

    with torch.cuda.stream(torch.cuda.Stream()):
        estimate_ms = eager_ms(call)  # its warm-up call, then five between events
        n = max(1, int(rep_ms / estimate_ms)) if estimate_ms else 1000
        if whole:
            n = -(-n // n_sets) * n_sets
        t0 = time.perf_counter()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                call()
        torch.cuda.synchronize()
        idle_ms = (time.perf_counter() - t0) * 1e3
        out = []
        for _ in range(10):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            g.replay()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / n)
    return out, idle_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--repeat", type=int, default=2, help="times the whole sequence runs per case")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    import itertools

    import torch

    from worker.host.health import ClockSampler
    from worker.sweep.runner import CaseRunner, _spec_of

    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    try:
        from triton.testing import do_bench_cudagraph
    except ImportError:
        do_bench_cudagraph = None
    runner = CaseRunner("cuda")
    probe = runner.probe
    lines = [
        f"# One case, the same calls timed six ways ({torch.cuda.get_device_name()}, torch {torch.__version__})",
        "",
        f"Reproduce: `python -m benchmarks.fidelity.graph_length --cases {args.cases} --repeat {args.repeat}`",
        "",
        "first 3 / last 3: the median of a timer's first and last three replays; idle ms: from its capture's "
        "start to its first replay (the GPU runs nothing meanwhile).",
        "",
        "| case | pass | timer | µs | / fleetbench | first 3 | last 3 | idle ms | MHz |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases(args.cases):
        prepared = runner._prepare(case, _spec_of(case))
        fn, n_sets = prepared[0], prepared[2]
        for rep in range(1, args.repeat + 1):
            got: dict[str, Timed] = {}
            with ClockSampler(probe) as clock:
                stats = runner.timer.time_cuda(fn, n_sets, case.timing).stats
            got["fleetbench"] = Timed(stats.samples_us, 0.0, clock.median_mhz)
            for key, stream in (("long graph", runner.timer.capture_stream()), ("long, side", torch.cuda.Stream())):
                with ClockSampler(probe) as clock:
                    times, idle = long_graph(fn, n_sets, stats.median_us, stream)
                got[key] = Timed(times, idle, clock.median_mhz)
            for key, whole in (("replica", False), ("replica, whole", True)):
                counter = itertools.count()
                with ClockSampler(probe) as clock:
                    times, idle = replica(lambda: fn(next(counter) % n_sets), n_sets, whole)
                got[key] = Timed(times, idle, clock.median_mhz)
            if do_bench_cudagraph is not None:
                counter = itertools.count()
                with torch.cuda.stream(torch.cuda.Stream()), ClockSampler(probe) as clock:
                    times = [t * 1e3 for t in do_bench_cudagraph(lambda: fn(next(counter) % n_sets), return_mode="all")]
                got["triton"] = Timed(times, float("nan"), clock.median_mhz)  # its capture is not seen from outside
            fb = got["fleetbench"].median
            for key, t in got.items():
                # fleetbench's samples are not replays in a row from idle: no first and last three
                first, last = (
                    ("", "")
                    if key == "fleetbench"
                    else (f"{t.part(slice(0, 3)):.3f}", f"{t.part(slice(-3, None)):.3f}")
                )
                idle = "" if t.idle_ms != t.idle_ms or key == "fleetbench" else f"{t.idle_ms:.1f}"
                lines.append(
                    f"| {case.backend} {case.m}x{case.n}x{case.k} | {rep} | {key} | {t.median:.3f} | "
                    f"{t.median / fb:.3f} | {first} | {last} | {idle} | {t.mhz or 0:.0f} |"
                )
                print(lines[-1], flush=True)
        prepared = fn = None
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
