#!/usr/bin/env python3
"""For which cases does time x clock hold still across clock states? (issue 40) Each case's CUDA graph
(~2 ms a replay, cold L2 as a sweep times it) is timed in WINDOWS windows, each after a different
history (idle 0 or 400 ms, then 0-600 ms of its own load), with the SM clock read three ways: in the
stream by fleetbench's stamp kernel (worker/measure/streamclock.py), and by NVML before and after. Per case the
coefficient of variation over the windows of the time, of time x in-stream clock (cycles per call) and
of time x NVML clock; a case whose cycles hold still while its time moves is clock-bound, and there a
comparison can be judged on its work (docs/COMPARING.md).

    python -m benchmarks.gpu_state.stream_clock [--windows 20] [--out FILE.md]

Needs a CUDA GPU; run with the repo on PYTHONPATH (device_check.sh's `stream-clock` step does).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import publish

SHAPES = [
    ("bf16", 1024, 2048, 6144),
    ("bf16", 512, 2048, 6144),
    ("fp8", 1024, 2048, 6144),
    ("fp8", 512, 2048, 6144),
    ("bf16", 256, 2048, 6144),
    ("bf16", 64, 2048, 6144),
    ("bf16", 16, 2048, 6144),
    ("bf16", 128, 768, 6144),
]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def graph_of(family: str, m: int, n: int, k: int):
    """A replayable graph of ~2 ms of calls rotating over enough input sets to miss the L2, and its calls."""
    import torch

    sets = []
    for s in range(8):
        g = torch.Generator(device="cuda").manual_seed(s)
        a = torch.randn((m, k), generator=g, device="cuda").to(torch.bfloat16)
        b = torch.randn((n, k), generator=g, device="cuda").to(torch.bfloat16)
        if family == "fp8":
            a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        sets.append((a, b))
    one = torch.ones((), device="cuda")

    def call(i):
        a, b = sets[i % len(sets)]
        if family == "fp8":
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return torch.mm(a, b.t())

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(16):
            call(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(16):
        call(i)
    end.record()
    end.synchronize()
    calls = max(8, int(2000 / (start.elapsed_time(end) * 1e3 / 16)) // 8 * 8)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            call(i)
    torch.cuda.synchronize()
    return graph, calls


def main(argv=None) -> int:
    import torch

    from worker.host.health import NvmlProbe
    from worker.measure.streamclock import StreamClock

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=20, help="timed windows per case (default 20)")
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    clock = StreamClock.open()
    if clock is None:
        raise SystemExit(f"no in-stream clock: {StreamClock.problem}")
    probe = NvmlProbe.for_current_device()
    rng = random.Random(40)
    lines = [
        "| case | time CV | time × in-stream clock CV | time × NVML clock CV | in-stream MHz | NVML MHz |",
        "|---|---:|---:|---:|---|---|",
    ]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for family, m, n, k in SHAPES:
        graph, calls = graph_of(family, m, n, k)
        times, stream_mhz, nvml_mhz = [], [], []
        for _ in range(args.windows):
            time.sleep(rng.choice([0.0, 0.4]))
            deadline = time.perf_counter() + rng.uniform(0.0, 0.6)
            while time.perf_counter() < deadline:
                graph.replay()
                torch.cuda.synchronize()
            before = probe.snapshot().sm_clock_mhz if probe else None
            i = clock.stamp()
            start.record()
            for _ in range(5):
                graph.replay()
            end.record()
            j = clock.stamp()
            end.synchronize()
            after = probe.snapshot().sm_clock_mhz if probe else None
            times.append(start.elapsed_time(end) * 1e3 / (5 * calls))
            stream_mhz.append(clock.mhz(i, j))
            nvml_mhz.append(((before or 0) + (after or 0)) / 2)
            clock.reset()
        work = [t * f for t, f in zip(times, stream_mhz)]
        nvml_work = [t * f for t, f in zip(times, nvml_mhz)]
        lines.append(
            f"| {family} {m}×{n}×{k} | {cv(times):.2%} | {cv(work):.2%} | {cv(nvml_work):.2%} | "
            f"{min(stream_mhz):.0f}–{max(stream_mhz):.0f} | {min(nvml_mhz):.0f}–{max(nvml_mhz):.0f} |"
        )
        print(lines[-1], flush=True)
        del graph
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
