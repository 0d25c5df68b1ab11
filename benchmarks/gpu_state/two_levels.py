#!/usr/bin/env python3
"""What sets the level of a case that runs at two levels? (issue 40) On the H100 the bf16 GEMM at
128x2048x6144 reads about 14.4 or 15.6 µs per call from one round to the next at the same in-stream SM
clock, and separate processes read it up to 10% apart (benchmarks/RESULTS.md, "A/A across fresh
processes"). Experiments on each case's cold-L2 graph (rotating over input sets as the worker does),
each timed per ~2 ms replay:

  long      one graph replayed back to back for LONG_S seconds: does the level change within a run of
            replays, and how often?
  idle      WINDOWS windows of 5 replays, each after idle (0, 50, 200 or 500 ms) and 20 ms of its own load,
            on the same graph: does the level follow what the GPU did before?
  capture   WINDOWS windows, each on a graph captured afresh over the same inputs: is it the graph?
  inputs    WINDOWS windows, each on input sets drawn afresh (other values; the old ones still held, so the
            new ones sit elsewhere) and a graph over them: is it the inputs?
  placement the same with the same values in every window (the worker's inputs come from the case's seed):
            is it where the inputs sit alone?

  onset     REPEAT times: idle 500 ms, then ONSET_MS of back-to-back replays; the median µs per call by how
            long the load had lasted (0-10, 10-20, 20-40, ... ms): when does a sustained load reach its level?

Per experiment the window medians' spread (p5, median, p95, max/min) and, for `long`, how many replays
crossed between the lower and the upper fifth of the range. The in-stream SM clock (worker/measure/streamclock.py)
is read around every window, so a level that follows the clock shows as one.

    python -m benchmarks.gpu_state.two_levels [--windows 24] [--long-s 3] [--experiments long,onset]
        [--shapes 128x2048x6144,...] [--out FILE.md]

Needs a CUDA GPU; run from the repo root (device_check.sh's `two-levels` step does).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

SHAPES = [(128, 2048, 6144), (64, 2048, 6144), (256, 768, 6144)]  # the two-level cell and two steady ones
EXPERIMENTS = ("onset", "long", "idle", "capture", "inputs", "placement")
L2_FACTOR = 3  # input sets: enough to stream this many L2s between two uses of a set (the worker's rule)


def input_sets(m: int, n: int, k: int, seed: int):
    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    count = max(2, math.ceil(L2_FACTOR * l2 / ((m + n) * k * 2)) + 1)
    out = []
    for s in range(count):
        g = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + s)
        a = torch.randn((m, k), generator=g, device="cuda").to(torch.bfloat16)
        b = torch.randn((n, k), generator=g, device="cuda").to(torch.bfloat16)
        out.append((a, b.t()))
    return out


def graph_over(sets, stream, calls: int = 0):
    """A graph of `calls` (0: ~2 ms worth, whole rotations) torch.mm calls rotating over `sets`."""
    import torch

    def call(i):
        a, bt = sets[i % len(sets)]
        return torch.mm(a, bt)

    with torch.cuda.stream(stream):
        for i in range(2 * len(sets)):
            call(i)
    torch.cuda.synchronize()
    if not calls:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        with torch.cuda.stream(stream):
            for i in range(2 * len(sets)):
                call(i)
        end.record(stream)
        end.synchronize()
        per_call_ms = start.elapsed_time(end) / (2 * len(sets))
        calls = max(len(sets), round(2.0 / per_call_ms / len(sets)) * len(sets))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            call(i)
    torch.cuda.synchronize()
    return graph, calls


class Timer:
    def __init__(self, stream, clock):
        import torch

        self.torch, self.stream, self.clock = torch, stream, clock
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def load(self, graph, ms: float) -> None:
        deadline = time.perf_counter() + ms / 1e3
        while time.perf_counter() < deadline:
            graph.replay()
            self.torch.cuda.synchronize()

    def window(self, graph, calls: int, replays: int = 5) -> tuple[float, float]:
        """(µs per call, in-stream MHz) of `replays` replays back to back."""
        i = self.clock.stamp(self.stream) if self.clock else None
        self.start.record(self.stream)
        with self.torch.cuda.stream(self.stream):
            for _ in range(replays):
                graph.replay()
        self.end.record(self.stream)
        j = self.clock.stamp(self.stream) if self.clock else None
        self.end.synchronize()
        read = self.clock.mhz(i, j) if self.clock else None
        mhz = float("nan") if read is None else read
        if self.clock:
            self.clock.reset()
        return self.start.elapsed_time(self.end) * 1e3 / (replays * calls), mhz


def spread_row(name: str, values: list[float], mhz: list[float], extra: str = "") -> str:
    q = statistics.quantiles(values, n=20)
    finite = [f for f in mhz if not math.isnan(f)]
    clock = f"{min(finite):.0f}–{max(finite):.0f}" if finite else "-"
    return (
        f"| {name} | {len(values)} | {q[0]:.2f} | {statistics.median(values):.2f} | {q[-1]:.2f} | "
        f"{max(values) / min(values) - 1:.1%} | {clock} | {extra} |"
    )


def crossings(values: list[float]) -> str:
    """How often consecutive values move between the lower and the upper fifth of their range."""
    lo, hi = min(values), max(values)
    low, high = lo + (hi - lo) / 5, hi - (hi - lo) / 5
    side, moves, runs = None, 0, []
    run = 0
    for v in values:
        now = "low" if v <= low else "high" if v >= high else side
        if side is not None and now != side:
            moves += 1
            runs.append(run)
            run = 0
        side, run = now, run + 1
    runs.append(run)
    shares = sum(v >= high for v in values) / len(values)
    return f"{moves} moves between the lower and upper fifth; {shares:.0%} of replays in the upper; longest run {max(runs)}"


ONSET_BINS_MS = (0, 10, 20, 40, 80, 160, 320, 640)


def onset(graph, calls: int, timer: Timer, repeat: int, onset_ms: float) -> str:
    """Median µs per call by how long the load had lasted (ONSET_BINS_MS), over `repeat` loads after idle."""
    bins: dict[int, list[float]] = {}
    for _ in range(repeat):
        time.sleep(0.5)
        t0 = time.perf_counter()
        while (elapsed := (time.perf_counter() - t0) * 1e3) < onset_ms:
            us, _ = timer.window(graph, calls, replays=1)
            b = max(i for i, edge in enumerate(ONSET_BINS_MS) if elapsed >= edge)
            bins.setdefault(b, []).append(us)
    parts = []
    for i in sorted(bins):
        hi = ONSET_BINS_MS[i + 1] if i + 1 < len(ONSET_BINS_MS) else None
        label = f"{ONSET_BINS_MS[i]}-{hi}" if hi else f"{ONSET_BINS_MS[i]}+"
        parts.append(f"{label} ms: {statistics.median(bins[i]):.2f}")
    return "; ".join(parts)


def one_case(m: int, n: int, k: int, args, timer: Timer, rng: random.Random) -> list[str]:
    import torch

    stream = timer.stream
    sets = input_sets(m, n, k, seed=0)
    graph, calls = graph_over(sets, stream)
    name = f"bf16 {m}×{n}×{k}"
    rows = []
    want = set(args.experiments.split(","))
    if "onset" in want:
        rows.append(
            f"| {name} onset | {args.repeat} | | | | | | {onset(graph, calls, timer, args.repeat, args.onset_ms)} |"
        )
    if "long" in want:
        rows.append(long_run(graph, calls, timer, args.long_s, name))
    if "idle" in want:
        rows.append(after_idle(graph, calls, timer, args.windows, rng, name))
    if "capture" in want:
        rows.append(fresh_capture(sets, stream, calls, timer, args.windows, name))
    if "inputs" in want:
        rows.append(fresh_inputs((m, n, k), stream, calls, timer, args.windows, name))
    if "placement" in want:
        rows.append(fresh_inputs((m, n, k), stream, calls, timer, args.windows, name, same_values=True))
    del graph, sets
    torch.cuda.empty_cache()
    return rows


def long_run(graph, calls: int, timer: Timer, long_s: float, name: str) -> str:
    timer.load(graph, 100)
    values, clocks = [], []
    deadline = time.perf_counter() + long_s
    while time.perf_counter() < deadline:
        us, mhz = timer.window(graph, calls, replays=1)
        values.append(us)
        clocks.append(mhz)
    return spread_row(f"{name} long", values, clocks, crossings(values))


def after_idle(graph, calls: int, timer: Timer, windows: int, rng: random.Random, name: str) -> str:
    values, clocks, by_idle = [], [], {}
    for _ in range(windows):
        idle = rng.choice([0.0, 0.05, 0.2, 0.5])
        time.sleep(idle)
        timer.load(graph, 20)
        us, mhz = timer.window(graph, calls)
        values.append(us)
        clocks.append(mhz)
        by_idle.setdefault(idle, []).append(us)
    note = "; ".join(f"idle {int(i * 1e3)} ms: median {statistics.median(v):.2f}" for i, v in sorted(by_idle.items()))
    return spread_row(f"{name} idle", values, clocks, note)


def fresh_capture(sets, stream, calls: int, timer: Timer, windows: int, name: str) -> str:
    values, clocks = [], []
    for _ in range(windows):
        fresh, _ = graph_over(sets, stream, calls)
        timer.load(fresh, 20)
        us, mhz = timer.window(fresh, calls)
        values.append(us)
        clocks.append(mhz)
        del fresh
    return spread_row(f"{name} capture", values, clocks, "a graph captured afresh per window")


def fresh_inputs(shape, stream, calls: int, timer: Timer, windows: int, name: str, same_values: bool = False) -> str:
    values, clocks, held = [], [], []
    for w in range(windows):
        fresh_sets = input_sets(*shape, seed=0 if same_values else 1 + w)
        held.append(fresh_sets)  # the next window's sets cannot reuse these addresses
        if len(held) > 3:
            held.pop(0)
        fresh, _ = graph_over(fresh_sets, stream, calls)
        timer.load(fresh, 20)
        us, mhz = timer.window(fresh, calls)
        values.append(us)
        clocks.append(mhz)
        del fresh
    if same_values:
        return spread_row(f"{name} placement", values, clocks, "input sets allocated afresh per window, same values")
    return spread_row(f"{name} inputs", values, clocks, "input sets drawn and allocated afresh per window")


def main(argv=None) -> int:
    import torch

    from worker.measure.streamclock import StreamClock

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=24, help="windows per experiment (default 24)")
    parser.add_argument("--long-s", type=float, default=3.0, help="seconds of back-to-back replays (default 3)")
    parser.add_argument(
        "--experiments",
        default=",".join(EXPERIMENTS),
        help="which, comma-separated (default: all)",
    )
    parser.add_argument("--shapes", help="MxNxK,... (default: 128x2048x6144,64x2048x6144,256x768x6144)")
    parser.add_argument("--repeat", type=int, default=5, help="onset: loads after idle (default 5)")
    parser.add_argument("--onset-ms", type=float, default=400.0, help="onset: ms of load each (default 400)")
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    unknown = set(args.experiments.split(",")) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"--experiments: unknown {', '.join(sorted(unknown))} (known: {', '.join(EXPERIMENTS)})")
    try:
        shapes = [tuple(int(x) for x in s.split("x", 2)) for s in args.shapes.split(",")] if args.shapes else SHAPES
    except ValueError:
        parser.error(f"--shapes {args.shapes!r}: give MxNxK,... such as 128x2048x6144")
    if any(len(shape) != 3 or min(shape) < 1 for shape in shapes):
        parser.error(f"--shapes {args.shapes!r}: give MxNxK,... such as 128x2048x6144")
    clock = StreamClock.open()
    timer = Timer(torch.cuda.Stream(), clock)
    rng = random.Random(40)
    lines = [
        f"# Two levels? bf16 GEMMs on {torch.cuda.get_device_name(0)}: µs per call, cold L2",
        "",
        "| case, experiment | windows | p5 | median | p95 | max / min - 1 | in-stream MHz | note |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for m, n, k in shapes:
        for row in one_case(m, n, k, args, timer, rng):
            lines.append(row)
            print(row, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
