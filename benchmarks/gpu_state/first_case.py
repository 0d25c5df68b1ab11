#!/usr/bin/env python3
"""Why does the first case of a worker process read low (issue 21)? One case, timed by the worker's own
code (CaseRunner: inputs, cold-L2 rotation, CUDA-graph replay), in fresh processes, under conditions
that tell the candidate causes apart. Each child process runs one sequence and prints its medians (µs):

  plain        first timing, then again (the effect itself)
  other-first  another shape (M=1024) first, then this case: first of the process or first of the shape?
  tiny-first   a trivial CUDA graph captured and replayed first: is it the process's first graph?
  eager-first  2 s of eager calls of this case first: GPU clock / power state after idle?
  sleep        first, again, 10 s idle, after-sleep: does idling bring it back?
  ref-first    an independent plain graph replay (not the worker's code) first, then the worker twice
  memory       first, then after torch.cuda.empty_cache() and after an 8 GiB block was freed

--clocks samples the SM clock and power (NVML, every ~1 ms) in a thread during a first and a second
timing. --dump DIR writes the first and second timing's graphs (torch's debug dump, DOT) and prints
how their nodes differ with addresses masked.

    python -m benchmarks.gpu_state.first_case [--backend torch-bf16 --m 16 --n 2048 --k 6144] [--procs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.harness import ROOT

CONDITIONS = [
    "plain",
    "other-first",
    "tiny-first",
    "eager-first",
    "sleep",
    "ref-first",
    "memory",
    "keep",
    "own-streams",
    "eager-on-capture-stream",
]


def _runner():
    from worker.sweep.runner import CaseRunner

    return CaseRunner("cuda")


def _timed(runner, backend, m, n, k, budget=0.3) -> float:
    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec, TimingOptions

    case = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(budget_s=budget, rounds=1))
    fn, sets, n_sets = runner._prepare(case, CATALOG[case.backend])
    stats = runner._time(case, fn, n_sets).stats
    del fn, sets
    return round(stats.median_us, 3)


def reference_graph(m: int, n: int, k: int, calls: int = 200, capture_stream=None):
    """torch.matmul over rotating bf16 sets (> 3x L2) in one plain CUDA graph of `calls` calls."""
    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = max(2, -(-3 * l2 // ((m + n) * k * 2)) + 1)
    sets = [
        (torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16())
        for _ in range(n_sets)
    ]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for a, b in sets:
            torch.matmul(a, b.T)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        for i in range(calls):
            a, b = sets[i % n_sets]
            torch.matmul(a, b.T)
    graph.replay()
    torch.cuda.synchronize()
    graph.sets = sets
    return graph


def replay_us(graph, calls: int = 200, reps: int = 50) -> float:
    """The median of `reps` replays between two events, per call."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return round(statistics.median(times), 3)


def reference_us(m: int, n: int, k: int) -> float:
    """An independent measurement: a plain graph replay of 200 calls between two events (not the worker's code)."""
    return replay_us(reference_graph(m, n, k))


def one_process(condition: str, backend: str, m: int, n: int, k: int) -> dict:
    import torch

    runner = _runner()
    out: dict = {}
    t = lambda mm=m: _timed(runner, backend, mm, n, k)  # noqa: E731
    if condition == "plain":
        out["first"] = t()
        out["again"] = t()
    elif condition == "other-first":
        out["M=1024 first"] = t(1024)
        out["then this case"] = t()
    elif condition == "tiny-first":
        x = torch.zeros(16, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        g.replay()
        torch.cuda.synchronize()
        out["after a tiny graph"] = t()
        out["again"] = t()
    elif condition == "eager-first":
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(n, k, device="cuda").bfloat16()
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline:
            for _ in range(64):
                torch.matmul(a, b.T)
            torch.cuda.synchronize()
        out["after 2 s eager"] = t()
        out["again"] = t()
    elif condition == "sleep":
        out["first"] = t()
        out["again"] = t()
        time.sleep(10)
        out["after 10 s idle"] = t()
    elif condition == "ref-first":
        out["reference first"] = reference_us(m, n, k)
        out["worker then"] = t()
        out["worker again"] = t()
        out["reference again"] = reference_us(m, n, k)
    elif condition == "keep":  # is it a property of the first graph, or of the process's state?
        g1 = reference_graph(m, n, k)
        out["graph 1"] = replay_us(g1)
        g2 = reference_graph(m, n, k)
        out["graph 2"] = replay_us(g2)
        out["graph 1 again"] = replay_us(g1)
        out["graph 2 again"] = replay_us(g2)
        del g1
        g3 = reference_graph(m, n, k)
        out["graph 3 (after 1 freed)"] = replay_us(g3)
    elif condition == "own-streams":  # each graph captured on a stream of its own
        for i in range(3):
            out[f"graph {i + 1}, own capture stream"] = replay_us(
                reference_graph(m, n, k, capture_stream=torch.cuda.Stream())
            )
    elif condition == "eager-on-capture-stream":  # the capture stream has run a matmul before its first capture
        from torch.cuda.graphs import graph as graph_ctx

        if graph_ctx.default_capture_stream is None:
            graph_ctx.default_capture_stream = torch.cuda.Stream()
        with torch.cuda.stream(graph_ctx.default_capture_stream):
            torch.matmul(torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16().T)
        torch.cuda.synchronize()
        out["graph 1"] = replay_us(reference_graph(m, n, k))
        out["graph 2"] = replay_us(reference_graph(m, n, k))
    elif condition == "memory":
        out["first"] = t()
        torch.cuda.empty_cache()
        out["after empty_cache"] = t()
        big = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
        del big
        out["after 8 GiB freed"] = t()
    return out


def clocks(backend: str, m: int, n: int, k: int) -> None:
    """Mean SM clock (MHz) and power (W) sampled during a first and a second timing in one process."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    runner = _runner()
    for label in ("first", "again", "third"):
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                samples.append(
                    (
                        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                        pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    )
                )
                time.sleep(0.001)

        th = threading.Thread(target=sample)
        th.start()
        us = _timed(runner, backend, m, n, k)
        stop.set()
        th.join()
        sm = [s[0] for s in samples]
        print(
            f"{label}: {us:.2f} us; SM clock mean {statistics.mean(sm):.0f} MHz (min {min(sm)}, max {max(sm)}), "
            f"mem clock {statistics.mean(s[1] for s in samples):.0f} MHz, "
            f"power mean {statistics.mean(s[2] for s in samples):.0f} W, {len(samples)} samples",
            flush=True,
        )


def timeline(backend: str, m: int, n: int, k: int, steps: int = 25) -> None:
    """Consecutive short timings in one fresh process, each with the SM clock read before and after."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    sm = lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)  # noqa: E731
    runner = _runner()
    t0 = time.perf_counter()
    for i in range(steps):
        before = sm()
        us = _timed(runner, backend, m, n, k, budget=0.03)
        print(f"  t={time.perf_counter() - t0:6.2f} s  {us:6.2f} us  SM {before} -> {sm()} MHz", flush=True)
        if i == steps // 2:
            time.sleep(3)
            print("  (3 s idle)", flush=True)


def dump(backend: str, m: int, n: int, k: int, out_dir: Path) -> None:
    """Dump the graphs of a first and a second timing (torch's CUDA graph debug dump) and compare them."""
    import torch

    made: list = []
    base = torch.cuda.CUDAGraph

    class DebugGraph(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            try:
                super().__init__(*a, keep_graph=True, **kw)  # the cudaGraph_t outlives instantiation
            except TypeError:
                super().__init__(*a, **kw)
            self.enable_debug_mode()
            made.append(self)

    torch.cuda.CUDAGraph = DebugGraph
    runner = _runner()
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for label in ("first", "second"):
        made.clear()
        us = _timed(runner, backend, m, n, k, budget=0.1)
        main = made[-1]  # the probe graph, then the timed graph
        path = out_dir / f"graph-{label}.dot"
        main.debug_dump(str(path))
        text = path.read_text()
        masked = re.sub(r"0x[0-9a-f]+", "0x?", text)
        masked = re.sub(r"\b\d{6,}\b", "N", masked)
        summaries[label] = (us, masked)
        print(f"{label}: {us:.2f} us, {text.count('->')} edges, {len(text)} bytes", flush=True)
    a, b = summaries["first"][1].splitlines(), summaries["second"][1].splitlines()
    import difflib

    diff = [line for line in difflib.unified_diff(a, b, "first", "second", lineterm="", n=0)]
    print(f"masked diff: {len(diff)} lines")
    for line in diff[:60]:
        print("  " + line[:220])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="torch-bf16")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=6144)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--child", choices=CONDITIONS)
    ap.add_argument("--clocks", action="store_true")
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--timeline", action="store_true")
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    shape = (args.backend, args.m, args.n, args.k)
    if args.clocks:
        clocks(*shape)
        return 0
    if args.timeline:
        timeline(*shape)
        return 0
    if args.dump:
        dump(*shape, args.dump)
        return 0
    if args.child:
        print(json.dumps(one_process(args.child, *shape)))
        return 0
    print(f"{args.backend} {args.m}x{args.n}x{args.k}, cold L2, graph replay; median µs per process\n")
    print("| condition | step | per process | median |")
    print("|---|---|---|---:|")
    for condition in args.conditions.split(","):
        rows: dict[str, list[float]] = {}
        for _ in range(args.procs):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.gpu_state.first_case",
                    "--child",
                    condition,
                    "--backend",
                    args.backend,
                    "--m",
                    str(args.m),
                    "--n",
                    str(args.n),
                    "--k",
                    str(args.k),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if proc.returncode:
                print(f"| {condition} | failed: {proc.stderr.strip().splitlines()[-1:]} | | |", flush=True)
                break
            for name, value in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                rows.setdefault(name, []).append(value)
        for name, values in rows.items():
            print(
                f"| {condition} | {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
