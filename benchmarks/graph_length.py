#!/usr/bin/env python3
"""Why does Triton's do_bench_cudagraph read some power-limited GEMMs 3-8% below fleetbench with every
method matched (issue 30, benchmarks/RESULTS.md "fleetbench against FlashInfer's and Triton's timers")?

For each case, in one process, after the case is settled, four timings of the same rotating calls
(cold L2, the case's own input sets), each reporting the median per-call time and the median SM clock
NVML read while it ran:

    fleetbench      worker/timing.py time_cuda, as a sweep times it (~2 ms graphs, back to back)
    long graph      fleetbench's events around one replay of a graph of ~20 ms of calls, 10 replays
                    (Triton's method, written out), on fleetbench's capture stream
    long, side      the same on a fresh side stream (where do_bench_cudagraph captures)
    triton          triton.testing.do_bench_cudagraph(fn, return_mode="all"), its median

    python benchmarks/graph_length.py [--cases torch-bf16:256x2048x6144,...] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from cupti_after import cases  # noqa: E402  (the seed cases by backend:MxNxK)

DEFAULT_CASES = ("torch-bf16:256x2048x6144,torch-fp8:512x2048x6144,torch-fp8:1024x2048x6144,"
                 "flashinfer-fp8-cublas:512x2048x6144,torch-bf16:1024x2048x6144,torch-bf16:16x2048x6144")


def long_graph(fn, n_sets: int, per_call_us: float, stream, replays: int = 10, rep_ms: float = 20.0) -> float:
    import torch

    from worker import timing

    calls = max(n_sets, int(rep_ms * 1e3 / per_call_us))
    calls = -(-calls // n_sets) * n_sets
    with torch.cuda.stream(stream):
        graph = timing._capture(fn, calls, n_sets, stream)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(replays):
            start.record(stream)
            graph.replay()
            end.record(stream)
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    from worker import timing
    from worker.health import ClockSampler
    from worker.runner import CaseRunner, _spec_of

    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    try:
        from triton.testing import do_bench_cudagraph
    except ImportError:
        do_bench_cudagraph = None
    runner = CaseRunner("cuda")
    probe = runner.probe
    lines = [f"# One case, four timers of the same calls ({torch.cuda.get_device_name()}, torch {torch.__version__})",
             "", f"Reproduce: `python benchmarks/graph_length.py --cases {args.cases}`", "",
             "| case | fleetbench µs (MHz) | long graph µs (MHz) | / fb | long, side stream µs (MHz) | / fb | "
             "triton µs (MHz) | / fb |", "|---|---|---|---:|---|---:|---|---:|"]
    for case in cases(args.cases):
        fn, sets, n_sets = runner._prepare(case, _spec_of(case))
        got = {}
        with ClockSampler(probe) as clock:
            stats = timing.time_cuda(fn, n_sets, case.timing)
        got["fb"] = (stats.median_us, clock.median_mhz)
        for key, stream in (("long", timing._capture_stream()), ("side", torch.cuda.Stream())):
            with ClockSampler(probe) as clock:
                us = long_graph(fn, n_sets, stats.median_us, stream)
            got[key] = (us, clock.median_mhz)
        if do_bench_cudagraph is not None:
            import itertools

            counter = itertools.count()
            with torch.cuda.stream(torch.cuda.Stream()), ClockSampler(probe) as clock:
                times = do_bench_cudagraph(lambda: fn(next(counter) % n_sets), return_mode="all")
            got["triton"] = (statistics.median(times) * 1e3, clock.median_mhz)

        def cell(key: str) -> str:
            us, mhz = got[key]
            return f"{us:.3f} ({mhz or 0:.0f})"

        fb = got["fb"][0]
        row = f"| {case.backend} {case.m}x{case.n}x{case.k} | {cell('fb')} "
        for key in ("long", "side", "triton"):
            row += f"| {cell(key)} | {got[key][0] / fb:.3f} " if key in got else "|  |  "
            # (a Triton that is not installed leaves its two cells empty)
        lines.append(row + "|")
        print(lines[-1], flush=True)
        del fn, sets
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
