#!/usr/bin/env python3
"""Do two graphs of the same GEMM time the same when each has buffers of its own?

Head-to-head on an H100 read a kernel against its identical copy 1.6-2.7% apart at 512x2048x6144, the
same way in every cycle of a sweep and another way in the next sweep (benchmarks/RESULTS.md, issue 40):
a property of the two graphs, not of their places in the cycle. This probe, sharing no code with the
worker, takes bf16 `torch.mm` on each shape and builds, per trial, four graphs of ~2 ms over a cold-L2
rotation (input sets totalling > 3x L2):
  own       its own input sets and outputs (the reference graph)
  copy      the same, on input sets and outputs allocated apart: what a second contender has
  shared    the reference's input sets, outputs of its own
  same      the reference's input sets and outputs, captured again
They are replayed interleaved (A B C D, D C B A, rotated each two; after `--settle-ms` of the same
cycles), and each graph's median over the cycles is set against the reference's. Each trial allocates
everything afresh; `--trials` trials per shape.

    python -m benchmarks.gpu_state.buffers [--shapes 512x2048x6144,...] [--trials 4] [--out FILE.md]

Prints Markdown (and writes FILE.md). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.harness import publish

SHAPES = "128x2048x6144,256x2048x6144,512x2048x6144,1024x2048x6144,64x768x6144"
NAMES = ("own", "copy", "shared", "same")


def shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def input_sets(torch, m: int, n: int, k: int, l2_bytes: int) -> list:
    per_set = (m * k + n * k) * 2
    count = max(2, -(-3 * l2_bytes // per_set))
    g = torch.Generator(device="cuda").manual_seed(0)
    return [
        (
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g),
            torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g),
        )
        for _ in range(count)
    ]


def graph_over(torch, sets: list, outs: list, target_ms: float = 2.0):
    """A CUDA graph of mm over the rotation (out= each set's own output), enough rotations for ~target_ms."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for (a, b), o in zip(sets, outs):  # warm-up, outside the capture
            torch.mm(a, b.T, out=o)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for (a, b), o in zip(sets, outs):
        torch.mm(a, b.T, out=o)
    end.record()
    torch.cuda.synchronize()
    rotations = max(1, round(target_ms / max(start.elapsed_time(end), 1e-3)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(rotations):
            for (a, b), o in zip(sets, outs):
                torch.mm(a, b.T, out=o)
    return graph, rotations * len(sets)


def replay_us(torch, graph, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def order(members: int, cycle: int) -> list[int]:
    shift = (cycle // 2) % members
    o = list(range(shift, members)) + list(range(shift))
    return o if cycle % 2 == 0 else o[::-1]


def trial(torch, m: int, n: int, k: int, l2_bytes: int, settle_ms: float, cycles: int) -> dict[str, float]:
    own_sets = input_sets(torch, m, n, k, l2_bytes)
    copy_sets = input_sets(torch, m, n, k, l2_bytes)

    def outs(count: int) -> list:
        return [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(count)]

    own_outs, copy_outs, shared_outs = outs(len(own_sets)), outs(len(copy_sets)), outs(len(own_sets))
    graphs = [  # the tensors stay referenced here while the graphs replay into them
        graph_over(torch, own_sets, own_outs),
        graph_over(torch, copy_sets, copy_outs),
        graph_over(torch, own_sets, shared_outs),
        graph_over(torch, own_sets, own_outs),
    ]
    series: list[list[float]] = [[] for _ in graphs]
    spent, c = 0.0, 0
    while spent < settle_ms or c % 2:
        for i in order(len(graphs), c):
            spent += replay_us(torch, *graphs[i]) * graphs[i][1] / 1e3
        c += 1
    for c in range(c, c + cycles + cycles % 2):
        for i in order(len(graphs), c):
            series[i].append(replay_us(torch, *graphs[i]))
    base = statistics.median(series[0])
    return {name: statistics.median(s) / base for name, s in zip(NAMES, series)} | {"own_us": base}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=SHAPES, help=f"MxNxK,... (default {SHAPES})")
    p.add_argument("--trials", type=int, default=4, help="fresh allocations per shape (default 4)")
    p.add_argument("--cycles", type=int, default=24, help="interleaved cycles timed per trial (default 24)")
    p.add_argument("--settle-ms", type=float, default=200.0, help="GPU ms of the same cycles first (default 200)")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("buffers: needs a CUDA GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20)
    lines = [
        f"## Identical GEMM graphs on their own buffers ({props.name}), bf16 torch.mm, interleaved",
        "",
        "Each trial: medians over the cycles against `own`'s; `copy` own inputs and outputs, `shared` own's "
        "inputs with outputs of its own, `same` own's inputs and outputs.",
        "",
        "| M×N×K | trial | own µs | copy / own | shared / own | same / own |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for text in args.shapes.split(","):
        m, n, k = shape(text)
        for t in range(args.trials):
            r = trial(torch, m, n, k, l2_bytes, args.settle_ms, args.cycles)
            lines.append(
                f"| {m}×{n}×{k} | {t + 1} | {r['own_us']:.2f} | {r['copy']:.4f} | {r['shared']:.4f} | {r['same']:.4f} |"
            )
            torch.cuda.empty_cache()
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
