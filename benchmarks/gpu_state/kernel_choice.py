#!/usr/bin/env python3
"""Which cuBLAS kernels does a K-padded copy of a GEMM run, in the calibration's graph and in the worker's?

On H100s the calibration and the head-to-head sweeps read the 256x2048x6144 copy apart (benchmarks/RESULTS.md,
issue 40: the figures, and this tool's answer). One cause it could be is another kernel: cuBLAS chooses by
shape and setting, and the two paths capture their graphs differently. This tool captures, per
shape and padding, one graph of ~2 ms of bf16 `torch.mm` calls as each path builds it (sharing its code):
  calibrate  benchmarks/detection/see_slowdowns.py `padded_graph` (its input sets, its side stream)
  worker     benchmarks/kernels/mm_pad.py's `prepare` on each input set, captured by the worker's own
             worker/measure/timing.py `_capture` after an eager warm-up on a side stream, as a sweep does
and lists the kernels one replay of each runs (torch.profiler), with their summed time per call.

    python -m benchmarks.gpu_state.kernel_choice [--shapes 256x2048x6144,...] [--pads 0,256] [--out FILE.md]

Prints Markdown (and writes FILE.md). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
from pathlib import Path

from benchmarks.harness import KERNELS, publish

SHAPES = "256x2048x6144,512x2048x6144,64x2048x6144,64x768x6144"
SETS = 8  # as calibrate: more than L2 holds at the larger shapes


def shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def short(name: str, width: int = 90) -> str:
    """A kernel's name without its template arguments' tail, kept whole up to `width` characters."""
    return name if len(name) <= width else name[: width - 1] + "…"


def per_call(events, calls: int) -> list[tuple[str, float, int]]:
    """(kernel name, µs per call, launches per call) from a profiler's CUDA kernel events of one replay of a
    graph of `calls` calls, the kernels in the order first seen."""
    total_us: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter = collections.Counter()
    for name, us in events:
        total_us[name] += us
        count[name] += 1
    return [(n, total_us[n] / calls, round(count[n] / calls)) for n in total_us]


def kernels_of(torch, graph, calls: int) -> list[tuple[str, float, int]]:
    from torch.profiler import ProfilerActivity, profile

    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    events = [
        (e.name, e.device_time)
        for e in prof.events()
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and e.device_time > 0
    ]
    return per_call(events, calls)


def worker_graph(torch, sets, pad: int, calls: int):
    import os

    from worker.measure.timing import _capture

    os.environ["FLEETBENCH_MM_PAD"] = str(pad)
    spec = importlib.util.spec_from_file_location("mm_pad_probe", KERNELS / "mm_pad.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # reads FLEETBENCH_MM_PAD when loaded, as a worker's process does
    runs = [module.prepare(a, b, torch.bfloat16) for a, b in sets]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for run in runs:
            run()
    return _capture(lambda i: runs[i](), calls, len(runs), stream), runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help=f"MxNxK,... (default {SHAPES})")
    ap.add_argument("--pads", default="0,256", help="columns of K added, comma-separated (default 0,256)")
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.detection.see_slowdowns import padded_graph

    if not torch.cuda.is_available():
        print("kernel_choice: needs a CUDA GPU", file=sys.stderr)
        return 2
    lines = [
        f"## Kernels of bf16 torch.mm on K-padded operands, per path ({torch.cuda.get_device_name()})",
        "",
        "| M×N×K | pad | path | kernels (µs per call, launches per call) |",
        "|---|---:|---|---|",
    ]
    for m, n, k in (shape(s) for s in args.shapes.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(m * n)
        sets = [
            (
                torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16),
                torch.randn((n, k), generator=gen, device="cuda").to(torch.bfloat16),
            )
            for _ in range(SETS)
        ]
        for pad in (int(p) for p in args.pads.split(",")):
            calls = 8 * SETS
            paths = {"calibrate": padded_graph(sets, pad, calls), "worker": worker_graph(torch, sets, pad, calls)}
            for path, (graph, _keep) in paths.items():
                found = kernels_of(torch, graph, calls)
                cell = "; ".join(f"`{short(name)}` {us:.2f} µs ×{x}" for name, us, x in found) or "none recorded"
                lines.append(f"| {m}×{n}×{k} | {pad} | {path} | {cell} |")
                print(lines[-1], file=sys.stderr, flush=True)
            del paths
        del sets
        torch.cuda.empty_cache()
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
