#!/usr/bin/env python3
"""Why does a large GEMM read differently after a heavy case than after a light one (issue 21)? In one
process: a predecessor case timed as the worker times it, then the case's own graph (captured as the
worker captures it: warm-up, cold-L2 rotation, ~2 ms per replay) replayed back to back for `--ms` of
GPU time, each replay timed by events, while a thread samples the SM clock and power (NVML, ~1 ms).
The replays are binned by the GPU time since the case began, so the table shows how fast the case
leaves the state its predecessor left. Then the worker's own reading of the case after each
predecessor, without settling and with the default settling.

    python -m benchmarks.gpu_state.neighbour [--cases 1024x2048x6144,256x2048x6144]
                                   [--before 16x768x6144,512x2048x6144] [--ms 1500] [--out DIR]

Prints Markdown (and writes DIR/neighbour.md, DIR/neighbour.json). Needs a CUDA GPU and pynvml.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

BINS_MS = [0, 5, 10, 20, 50, 100, 200, 500, 1000, 1500, 3000]


def shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def timed(runner, m, n, k, settle_ms=None):
    """The worker's reading of one case (one round, the sweep's timing otherwise)."""
    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec, TimingOptions

    opts = TimingOptions(budget_s=0.3, rounds=1)
    if settle_ms is not None:
        opts = opts.model_copy(update={"settle_ms": settle_ms})
    case = CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts)
    fn, sets, n_sets = runner._prepare(case, CATALOG[case.backend])
    stats = runner._time(case, fn, n_sets).stats
    del fn, sets
    return stats


def trace(runner, m, n, k, ms: float, nvml, handle):
    """Replays of the case's own graph for `ms` of GPU time: [(gpu ms since start, per-call us)] and
    NVML samples [(wall s since start, SM MHz, W)]."""
    import torch

    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec, TimingOptions
    from worker.measure import timing

    opts = TimingOptions(budget_s=0.3, rounds=1)
    case = CaseSpec(backend="torch-bf16", m=m, n=n, k=k, timing=opts)
    fn, sets, n_sets = runner._prepare(case, CATALOG[case.backend])
    stream = runner.timer.capture_stream()
    timing._warm_up(fn, n_sets, opts, stream)
    probe = timing._capture(fn, n_sets, n_sets, stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    probe.replay()
    end.record()
    end.synchronize()
    per_call_ms = start.elapsed_time(end) / n_sets
    cps = -(-max(32, round(2.0 / per_call_ms)) // n_sets) * n_sets
    graph = timing._capture(fn, cps, n_sets, stream)
    clocks, stop = [], threading.Event()
    t0 = time.perf_counter()

    def sample():
        while not stop.is_set():
            clocks.append(
                (
                    time.perf_counter() - t0,
                    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                    nvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                )
            )
            time.sleep(0.001)

    th = threading.Thread(target=sample)
    th.start()
    replays, gpu_ms = [], 0.0
    while gpu_ms < ms:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end)
        replays.append((gpu_ms, time.perf_counter() - t0, dt * 1e3 / cps))
        gpu_ms += dt
    stop.set()
    th.join()
    del graph, probe, fn, sets
    return replays, clocks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1024x2048x6144,256x2048x6144")
    ap.add_argument("--before", default="16x768x6144,512x2048x6144")
    ap.add_argument("--ms", type=float, default=1500.0)
    ap.add_argument("--out", type=Path, default=Path("neighbour-out"))
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    args.out.mkdir(parents=True, exist_ok=True)
    import pynvml

    from worker.sweep.runner import CaseRunner

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    runner = CaseRunner("cuda")
    timed(runner, 64, 2048, 6144)  # the process's priming pass and first graphs out of the way
    lines, data = [], []
    bins = [b for b in BINS_MS if b < args.ms] + [args.ms]
    for case in map(shape, args.cases.split(",")):
        head = "| before | " + " | ".join(f"{a:g}–{b:g} ms" for a, b in zip(bins, bins[1:])) + " |"
        lines += [
            f"### torch-bf16 {'x'.join(map(str, case))}, cold L2: per-call µs (SM MHz, W) by GPU time "
            "since the case began",
            "",
            head,
            "|---" * len(bins) + "|",
        ]
        readings = []
        for before in map(shape, args.before.split(",")):
            label = "x".join(map(str, before))
            timed(runner, *before)
            replays, clocks = trace(runner, *case, args.ms, pynvml, handle)
            cells = []
            for a, b in zip(bins, bins[1:]):
                inside = [r for r in replays if a <= r[0] < b]
                if not inside:
                    cells.append("–")
                    continue
                w0, w1 = inside[0][1], inside[-1][1] + 0.003
                near = [c for c in clocks if w0 <= c[0] <= w1]
                us = statistics.median(r[2] for r in inside)
                clock = (
                    f"{statistics.mean(c[1] for c in near):.0f} MHz, {statistics.mean(c[2] for c in near):.0f} W"
                    if near
                    else "no sample"
                )
                cells.append(f"{us:.2f} ({clock})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            data.append({"case": case, "before": before, "replays": replays, "clocks": clocks})
            for settle in (0.0, None):
                timed(runner, *before)
                stats = timed(runner, *case, settle_ms=settle)
                readings.append(
                    (label, "off" if settle == 0 else f"default ({stats.settle_ms:.0f} ms run)", stats.median_us)
                )
        lines += [
            "",
            "The worker's reading of the case after each predecessor:",
            "",
            "| before | settling | median µs |",
            "|---|---|---:|",
        ]
        lines += [f"| {b} | {s} | {us:.2f} |" for b, s, us in readings]
        lines.append("")
    md = "\n".join(lines) + "\n"
    (args.out / "neighbour.md").write_text(md)
    (args.out / "neighbour.json").write_text(json.dumps(data))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
