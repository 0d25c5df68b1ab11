#!/usr/bin/env python3
"""How long must a case settle, and what does a case inherit from the one before it (issue 29)?

`trace`: in one process, the seed sweep's cases in a given order, each prepared and captured as the
worker does, then its graph replayed back to back for `--ms` of GPU time; every replay's per-call time is
kept with the GPU time since the case began, and every few replays the SM clock, the clock-event reasons
and the instantaneous power (NVML). The JSON holds every trace, so settling rules can be judged offline
against the end of each trace (`--ref-from` ms on: the case's own sustained state).

`rules` (no GPU): on a trace's JSON, where the worker's settling rule stops each case and what it would
read there, against the trace at 300 ms and in its sustained state, with NVML's power and clock.

`decode`: the light decode GEMM's first reading in fresh processes, alone or after heavy cases, after a
large allocation freed without any kernel, and after heavy cases with the allocator's cache emptied:
tells the GPU's state apart from where the case's inputs landed in memory. Condition `replay` (after the
heavy cases) builds the case's timed graph once, as a case's first round does, then replays that same
graph as a later round does: right after, after 25 ms of eager calls of the case, and after 0.5 s idle.
Condition `series` (nothing before) builds it once and then times that graph 12 times in a row, each
reading with the milliseconds since the build ended: how long a state the build leaves lasts.
Conditions `heavy-kernels` and `kernels` (nothing before) list the kernels of each timing's first
replay (torch.profiler) beside its reading. `--case BACKEND:MxNxK` picks another case than the decode GEMM.

    python -m benchmarks.gpu_state.settle_trace trace [--orders up,down,shuffled] [--ms 400] [--out DIR]
    python -m benchmarks.gpu_state.settle_trace rules DIR/settle-trace.json [--peaks bf16=T,fp8=T] [--floor-ms 100] [--ref-from MS]
    python -m benchmarks.gpu_state.settle_trace decode [--procs 3] [--conditions first,heavy,...] [--case B:MxNxK] [--out DIR]

Needs a CUDA GPU and pynvml. Prints Markdown; writes DIR/settle-trace.{md,json} or DIR/decode.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT

WINDOWS_MS = [(0, 10), (10, 25), (25, 50), (50, 100), (100, 200), (200, 300)]
NVML_EVERY = 4  # replays between NVML readings: a reading leaves the GPU idle for a moment


def seed_cases(backends: list[str]):
    """The seed sweep's cases of `backends` that run on this GPU, as the controller plans them."""
    from orchestrator.config.sweep import load_sweep

    sweep = load_sweep(ROOT / "sweeps" / "glm5_tp8.yaml")
    sweep = sweep.model_copy(update={"backends": backends, "timing": sweep.timing.model_copy(update={"rounds": 1})})
    return sweep.cases()


def runnable(runner, case) -> bool:
    from worker.backends import availability_problem
    from worker.contract.catalog import support_problem
    from worker.sweep.runner import _spec_of

    spec = _spec_of(case)
    return not support_problem(
        spec, case.m, case.n, case.k, runner.device.compute_capability
    ) and not availability_problem(spec)


class Nvml:
    """NVML's SM clock, clock-event reasons and instantaneous power, as the worker reads them (NvmlProbe)."""

    def __init__(self):
        from worker.host.health import NvmlProbe

        self.probe = NvmlProbe.for_current_device()

    def read(self) -> tuple:
        if self.probe is None:
            return None, None, None
        # The three readings alone, not a whole snapshot: each NVML call leaves the GPU idle for a moment.
        return self.probe.sm_clock_mhz(), self.probe.throttle_reasons(), self.probe.power_instant_w()

    def power_limit_w(self):
        return None if self.probe is None else self.probe.power_limit_w()


def trace_case(runner, case, ms: float, nvml: Nvml) -> dict:
    """The case's graph, made as worker/measure/timing.py makes it, replayed for `ms` of GPU time."""
    import torch

    from worker.measure import timing
    from worker.sweep.runner import _spec_of

    t0 = time.perf_counter()
    fn, sets, n_sets = runner._prepare(case, _spec_of(case))
    stream = runner.timer.capture_stream()
    timing._warm_up(fn, n_sets, case.timing, stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_calls = max(timing.PROBE_CALLS, n_sets)
    probe = timing._capture(fn, probe_calls, n_sets, stream)
    probe.replay()
    start.record()
    probe.replay()
    end.record()
    end.synchronize()
    per_call_s = start.elapsed_time(end) / 1e3 / probe_calls
    cps = max(1, min(timing.MAX_CALLS_PER_SAMPLE, math.ceil(timing.TARGET_SAMPLE_S / max(per_call_s, 1e-7))))
    cps = -(-cps // n_sets) * n_sets
    graph = timing._capture(fn, cps, n_sets, stream)
    setup_s = time.perf_counter() - t0
    replays, gpu_ms = [], 0.0
    while gpu_ms < ms:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end)
        row = [round(gpu_ms, 3), round(dt * 1e3 / cps, 4)]
        if len(replays) % NVML_EVERY == 0:
            row += list(nvml.read())
        replays.append(row)
        gpu_ms += dt
    del graph, probe, fn, sets
    return {
        "backend": case.backend,
        "shape": f"{case.m}x{case.n}x{case.k}",
        "flops": 2 * case.m * case.n * case.k,
        "cps": cps,
        "setup_s": round(setup_s, 4),
        "replays": replays,
    }


def window(replays: list, a: float, b: float) -> float | None:
    inside = [r[1] for r in replays if a <= r[0] < b]
    return statistics.median(inside) if inside else None


def settle_stop(replays: list, cps: int, floor_ms: float, limit_ms: float) -> tuple[float, list[float]] | None:
    """Where the worker's settling rule (worker/measure/timing.py `_settle`, each replay of `cps` calls one
    batch) stops on this trace: (GPU ms spent, the settled tail), or None where it would still be drifting at
    the trace's end or at its limit (SETTLE_MAX_FACTOR x limit_ms). Its stopping test is the worker's own
    `drifting`; the GPU ms are the trace's, which `_settle` fed the rounded per-call times would sum apart."""
    from worker.measure.timing import SETTLE_MAX_FACTOR, drifting

    seen: list[float] = []
    for gpu_ms, us, *_ in replays:
        if gpu_ms >= SETTLE_MAX_FACTOR * limit_ms:
            return None
        seen.append(us)
        spent = gpu_ms + us * cps / 1e3  # GPU ms before this replay, and its own
        if spent >= floor_ms and len(seen) >= 6 and not drifting(seen):
            return spent, seen[-(len(seen) // 3) :]
    return None


def floors(rows: list, settle_ms: float, peaks: dict[str, float]) -> list[float]:
    """Each traced case's settling floor as the worker's Timer.settle_floor gives it, in the trace's order: a
    case's load is the share of its family's calibrated peak (`peaks`: TFLOPS per operand family) a call at
    its first replay's speed uses; without `peaks` every case is taken as heavy (load unknown)."""
    from worker.contract.catalog import CATALOG
    from worker.measure.timing import Timer

    timer, out = Timer(), []
    for r in rows:
        spec = CATALOG.get(r["backend"])
        peak = peaks.get(spec.family) if spec is not None else None
        first_us = r["replays"][0][1] if r["replays"] else None
        load = None if not peak or not first_us else r["flops"] / (peak * 1e12) / (first_us * 1e-6)
        out.append(timer.settle_floor(settle_ms, load))
    return out


def _nvml_at(nvml_rows: list, ms: float):
    """The latest NVML reading of a trace at `ms` (the first one, before any)."""
    before = [x for x in nvml_rows if x[0] <= ms]
    return before[-1] if before else (nvml_rows[0] if nvml_rows else None)


def _num(v, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def rules_main(args) -> int:
    """Each traced case: where settling as the worker does it stops, what it would read there (its settled
    tail), against the trace at 250-350 ms (a reference settled for 300 ms) and from --ref-from on (the
    case's own sustained state), with NVML's latest instantaneous power and clock where it stopped and at
    the end (NVML refreshes them about every 100 ms)."""
    raw = args.json.read_bytes()
    doc = json.loads(gzip.decompress(raw) if args.json.suffix == ".gz" else raw)
    ref_from = args.ref_from if args.ref_from is not None else doc["ref_from"]
    limit = doc.get("power_limit_w")
    peaks = (
        dict((k, float(v)) for k, v in (kv.split("=", 1) for kv in args.peaks.split(",") if kv)) if args.peaks else {}
    )
    lines = [
        f"Settling as the worker does (floor {args.floor_ms:g} ms for a heavy case and the one after it, "
        + (f"light ones by the peaks {args.peaks}" if peaks else "every case taken as heavy (no --peaks)")
        + f"; limit {args.limit_ms:g} ms) on the traces of {args.json.name}; `300 ms`: the trace's median at "
        f"250–350 ms; `sustained`: from {ref_from:g} ms on; power limit {limit if limit is not None else 'unknown'} W",
        "",
        "| order | backend | shape | floor ms | stops at ms | reads µs | / 300 ms | / sustained | W at stop | W at end | "
        "MHz at stop | MHz at end |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    outside, spent = [], []
    for order, rows in doc["traces"].items():
        for r, floor in zip(rows, floors(rows, args.floor_ms, peaks)):
            reps = r["replays"]
            stop = settle_stop(reps, r["cps"], floor, args.limit_ms)
            at300, end = window(reps, 250, 350), window(reps, ref_from, 1e12)
            nvml = [x for x in reps if len(x) > 2]
            if stop is None:
                lines.append(f"| {order} | {r['backend']} | {r['shape']} | {floor:g} | (drifting) | | | | | | | |")
                continue
            ms, tail = stop
            spent.append(ms)
            reads = statistics.median(tail)
            s, e = _nvml_at(nvml, ms), nvml[-1] if nvml else None
            rel300 = reads / at300 if at300 else None
            relend = reads / end if end else None
            if relend is not None and abs(relend - 1) > 0.05:
                outside.append(f"{r['backend']} {r['shape']}")
            lines.append(
                f"| {order} | {r['backend']} | {r['shape']} | {floor:g} | {ms:.0f} | {reads:.2f} | {_num(rel300)} | "
                f"{_num(relend)} | {_num(s[4] if s else None, 0)} | {_num(e[4] if e else None, 0)} | "
                f"{s[2] if s else ''} | {e[2] if e else ''} |"
            )
    lines += [
        "",
        f"- beyond ±5% of the sustained state where settling stops: {len(outside)} ({', '.join(outside)})",
        f"- settling would take {sum(spent):.0f} GPU ms over the {len(spent)} cases that stop",
    ]
    md = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(md)
    print(md)
    return 0


def order_cases(cases: list, order: str) -> list:
    up = sorted(cases, key=lambda c: (c.m * c.n * c.k, c.backend))
    if order == "up":
        return up
    if order == "down":
        return up[::-1]
    shuffled = list(cases)
    random.Random(29).shuffle(shuffled)
    return shuffled


def trace_main(args) -> int:
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cuda")
    nvml = Nvml()
    cases = [c for c in seed_cases(args.backends.split(",")) if runnable(runner, c)]
    # The process's priming pass and first graphs, out of the way as in the worker.
    from worker.sweep.runner import _spec_of

    fn, _, n_sets = runner._prepare(cases[0], _spec_of(cases[0]))
    runner.timer.time_cuda(fn, n_sets, cases[0].timing)
    del fn
    traces = {}
    lines = []
    for order in args.orders.split(","):
        rows = []
        for case in order_cases(cases, order):
            rows.append(trace_case(runner, case, args.ms, nvml))
        traces[order] = rows
        head = (
            "| backend | shape | "
            + " | ".join(f"{a}–{b} ms" for a, b in WINDOWS_MS)
            + f" | ≥{args.ref_from:g} ms (ref) | SM MHz at end |"
        )
        lines += [
            f"### order `{order}`: per-call µs by GPU time since the case began",
            "",
            head,
            "|---|---|" + "---:|" * (len(WINDOWS_MS) + 2),
        ]
        for r in rows:
            ref = window(r["replays"], args.ref_from, 1e9)
            cells = []
            for a, b in WINDOWS_MS:
                v = window(r["replays"], a, b)
                cells.append("–" if v is None else f"{v:.2f} ({v / ref - 1:+.1%})")
            clocks = [x[2] for x in r["replays"] if len(x) > 2 and x[2]]
            lines.append(
                f"| {r['backend']} | {r['shape']} | "
                + " | ".join(cells)
                + f" | {ref:.2f} | {clocks[-1] if clocks else '–'} |"
            )
        lines.append("")
    md = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "settle-trace.md").write_text(md)
    (args.out / "settle-trace.json").write_text(
        json.dumps({"ms": args.ms, "ref_from": args.ref_from, "power_limit_w": nvml.power_limit_w(), "traces": traces})
    )
    print(md)
    return 0


DECODE = """
import sys, time, statistics, torch
from worker.sweep.runner import CaseRunner, _spec_of
from worker.contract.schema import CaseSpec, TimingOptions
cond = {cond!r}
backend, shape = {case!r}.split(":")
M, N, K = (int(x) for x in shape.split("x"))
runner = CaseRunner("cuda")
def time_cuda(*args, **kwargs):  # the sweep's timing, on the process's one Timer (the runner's)
    return runner.timer.time_cuda(*args, **kwargs).stats
opts = TimingOptions(budget_s=0.3, rounds=1)
def kernels(run):
    # the kernels one timed replay runs (torch.profiler): name, count, mean us
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    rows = [(e.key, e.count, e.device_time_total / max(e.count, 1)) for e in prof.key_averages()
            if e.device_time_total > 0]
    print("KERNELS", "; ".join(f"{{k[:90]}} x{{c}} {{t:.2f}}us" for k, c, t in sorted(rows, key=lambda r: -r[1])[:3]))
    return 0
def timed(m, n, k, backend="torch-bf16", look=False):
    case = CaseSpec(backend=backend, m=m, n=n, k=k, timing=opts)
    fn, sets, n_sets = runner._prepare(case, _spec_of(case))
    stats = time_cuda(fn, n_sets, case.timing, timed_once=(lambda run: kernels(run)) if look else None)
    del fn, sets
    return stats.median_us
if cond in ("heavy", "heavy-emptied", "heavy-kernels", "replay"):
    for shape in ((512, 2048, 6144), (1024, 2048, 6144), (256, 2048, 6144)):
        timed(*shape)
    if cond == "heavy-emptied":
        torch.cuda.empty_cache()
elif cond == "freed":
    big = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    del big
elif cond == "idle":
    time.sleep(1.0)
look = cond in ("heavy-kernels", "kernels")
if cond == "series":
    case = CaseSpec(backend=backend, m=M, n=N, k=K, timing=opts)
    fn, sets, n_sets = runner._prepare(case, _spec_of(case))
    kept = []
    first = time_cuda(fn, n_sets, opts, keep=kept.append).median_us
    built = time.perf_counter()
    got = [f"{{first:.3f}}"]
    for _ in range(12):
        us = time_cuda(fn, n_sets, opts, graph=kept[0]).median_us
        got.append(f"{{us:.3f}}@{{(time.perf_counter() - built) * 1e3:.0f}}ms")
    print("DECODE", " ".join(got))
elif cond == "replay":
    case = CaseSpec(backend=backend, m=M, n=N, k=K, timing=opts)
    fn, sets, n_sets = runner._prepare(case, _spec_of(case))
    kept = []
    got = [time_cuda(fn, n_sets, opts, keep=kept.append).median_us,
           time_cuda(fn, n_sets, opts, graph=kept[0]).median_us]
    end = time.perf_counter() + 0.025
    while time.perf_counter() < end:
        fn(0)
    got.append(time_cuda(fn, n_sets, opts, graph=kept[0]).median_us)
    torch.cuda.synchronize()
    time.sleep(0.5)
    got.append(time_cuda(fn, n_sets, opts, graph=kept[0]).median_us)
    print("DECODE", " ".join(f"{{v:.3f}}" for v in got))
else:
    print("DECODE", " ".join(f"{{timed(M, N, K, backend, look=look):.3f}}" for _ in range(3)))
"""


def decode_main(args) -> int:
    conditions = args.conditions.split(",")
    lines = [
        f"### {args.case} (cold L2) in fresh processes: readings in a row (µs)",
        "",
        "`replay`: 1st the graph built (warm-up, capture, settle, samples), then the same graph replayed: "
        "2nd right after, 3rd after 25 ms of eager calls of the case, 4th after 0.5 s idle.",
        "",
        "| condition | process | 1st | 2nd | 3rd | 4th |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cond in conditions:
        for p in range(args.procs):
            out = subprocess.run(
                [sys.executable, "-c", DECODE.format(cond=cond, case=args.case)],
                env=dict(
                    os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
                ),
                capture_output=True,
                text=True,
                timeout=300,
            )
            for ln in out.stdout.splitlines():
                if ln.startswith("KERNELS"):
                    print(f"  {cond} {p + 1}: {ln}", flush=True)
                    lines.append(f"<!-- {cond} {p + 1}: {ln} -->")
            got = [ln.split()[1:] for ln in out.stdout.splitlines() if ln.startswith("DECODE")]
            cells = got[0] if got else ["failed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:80]]
            if cond == "series":  # 13 readings: all in the first column
                cells = [" ".join(cells)]
            lines.append(f"| {cond} | {p + 1} | " + " | ".join(cells + [""] * (4 - len(cells))) + " |")
            print(lines[-1], flush=True)
    md = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode.md").write_text(md)
    print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("trace")
    t.add_argument("--orders", default="up,down,shuffled")
    t.add_argument("--backends", default="torch-bf16,torch-fp8,flashinfer-fp8-cublas,reference-nvfp4")
    t.add_argument("--ms", type=float, default=400.0)
    t.add_argument("--ref-from", type=float, default=300.0)
    t.add_argument("--out", type=Path, default=Path("settle-out"))
    d = sub.add_parser("decode")
    d.add_argument("--procs", type=int, default=3)
    d.add_argument("--conditions", default="first,heavy,freed,heavy-emptied")
    d.add_argument("--case", default="torch-bf16:16x2048x6144", help="BACKEND:MxNxK (default: the decode GEMM)")
    d.add_argument("--out", type=Path, default=Path("settle-out"))
    r = sub.add_parser("rules", help="judge the worker's settling rule offline on a trace's JSON (no GPU)")
    r.add_argument("json", type=Path, help="settle-trace.json of `trace` (or it gzipped, .json.gz)")
    r.add_argument("--floor-ms", type=float, default=100.0, help="the least GPU ms a heavy case settles (settle_ms)")
    r.add_argument(
        "--peaks",
        default="",
        help="the GPU's calibrated TFLOPS per operand family, e.g. bf16=796.57,fp8=1425.18 (the facts' calibration): "
        "which cases are light, as the worker tells; without it every case settles the heavy floor",
    )
    r.add_argument("--limit-ms", type=float, default=100.0, help="settle_ms, whose SETTLE_MAX_FACTOR x caps it")
    r.add_argument("--ref-from", type=float, default=None, help="the sustained state from this ms on (the trace's)")
    r.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = ap.parse_args()
    if args.what == "rules":
        return rules_main(args)
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    return trace_main(args) if args.what == "trace" else decode_main(args)


if __name__ == "__main__":
    sys.exit(main())
