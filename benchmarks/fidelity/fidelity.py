"""Timing fidelity on a GPU: does the worker's timing agree with an independent reference?

For every seed shape (GLM-5 TP8) and every baseline that runs on this GPU, hot and cold L2:
  worker      the worker's own timing (CaseRunner.run: its inputs, warm-up, probe, graph, rotation)
  reference   a plain CUDA graph of N calls replayed between two events, written here and sharing no
              code with the worker: its own operands, quantization and library calls; cold rotates
              through input sets totalling > 3x L2, N whole rotations of >= 2 ms; replayed back to back
              for `--reference-settle-ms` (300) before its timed replays, so that it, like the worker,
              reads the GPU's sustained state under this kernel, not the boost state a light predecessor
              leaves (issue 21: a large GEMM reads ~15% faster for its first ~50 ms)
The pair is measured `--repeat` times in one process (worker and reference alternating which goes
first), then the whole seed sweep runs through the real worker CLI (`python -m worker supervise`).

    python -m benchmarks.fidelity.fidelity --out DIR [--repeat 2]   # prints Markdown, writes DIR/fidelity.{md,json}

With `--runs RUN_DIR...` it measures stored sweeps instead (issue 29's criterion): every ok baseline case
of each run (the median of its rounds, as the table shows it) against the reference, run after them in
this process (after one discarded timing: a process's first graph timing reads low): the median of
`--reference-passes` (3) timings of the case, one per pass over every case, forward then reversed, with
their spread; and beside it, each case's work (time x the SM clock, read in the stream, per round) against
the reference's, so that a miss in another clock state reads as such. One timing is not a yardstick for a power-capped case: two in one lease read torch-fp8
512x2048 15.16 and 16.73 µs (benchmarks/RESULTS.md). Then torch-fp8 against flashinfer-fp8-cublas: each
run's paired ratio (head-to-head, one shared clock) against their references' ratio of times and of work
(each timing's time x the SM clock it ran at, read in its stream by the worker's StreamClock): at the
power cap each reference runs at its own clock, and only the work leaves that out.

    python -m benchmarks.fidelity.fidelity --runs RUN_A RUN_B [--reference-passes 3] [--out FILE.md]

Needs a CUDA GPU and torch; FlashInfer (fp8 via cuBLAS) is used when importable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from benchmarks.harness import ROOT

BASELINES = ["torch-bf16", "torch-fp8", "flashinfer-fp8-cublas"]
# A worker's number agrees with the reference within this share (issue 29's bar, and issue 40's).
AGREES = 0.05
FP4 = [
    "flashinfer-fp4-cutlass",
    "flashinfer-fp4-cudnn",
    "flashinfer-fp4-trtllm",
    "flashinfer-fp4-auto",
    "flashinfer-fp4-b12x",
    "sgl-fp4-cutlass",
    "torch-nvfp4",
]


def seed_shapes():
    from orchestrator.config.sweep import Sweep

    sweep = Sweep(name="glm5", backends=["torch-bf16"], shapes=[{"preset": "glm5-tp8"}])
    return [(c.label, c.m, c.n, c.k) for c in sweep.cases()]


def reference_us(
    backend: str, m: int, n: int, k: int, cold: bool, replays: int = 30, settle_ms: float = 300.0
) -> float:
    """The independent reference (module docstring): median µs per call."""
    return reference(backend, m, n, k, cold, replays, settle_ms)[0]


def reference(
    backend: str, m: int, n: int, k: int, cold: bool, replays: int = 30, settle_ms: float = 300.0, clock=None
) -> tuple[float, Optional[float]]:
    """The independent reference (module docstring): (median µs per call, the SM clock its timed replays ran
    at in MHz, read in their stream by `clock`, a worker StreamClock; None without one)."""
    import torch

    def fp8(x):
        scale = x.abs().max().float().clamp(min=1e-12) / 448.0
        return (x.float() / scale).to(torch.float8_e4m3fn), scale.reshape(1)

    bytes_per_set = (m + n) * k * (2 if backend == "torch-bf16" else 1)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = math.ceil(3 * l2 / bytes_per_set) + 1 if cold else 1
    calls = []
    for _ in range(n_sets):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        if backend == "torch-bf16":
            calls.append(lambda a=a, b=b: torch.mm(a, b.t()))
        elif backend == "torch-fp8":
            (a8, sa), (b8, sb) = fp8(a), fp8(b)
            calls.append(
                lambda a8=a8, b8=b8, sa=sa, sb=sb: torch._scaled_mm(
                    a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16
                )
            )
        else:
            import flashinfer

            (a8, sa), (b8, sb) = fp8(a), fp8(b)
            a3, b3 = a8.unsqueeze(0), b8.unsqueeze(0).transpose(1, 2)
            calls.append(
                lambda a3=a3, b3=b3, sa=sa, sb=sb: flashinfer.bmm_fp8(
                    A=a3, B=b3, A_scale=sa, B_scale=sb, dtype=torch.bfloat16, backend="cublas"
                )
            )
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on the capture stream, as CUDA graph practice has it
        for _ in range(3):
            for c in calls:
                c()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for c in calls:
            c()
    g.replay()
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    per_call = start.elapsed_time(end) / len(calls)  # ms
    rotations = max(1, math.ceil(2.0 / per_call / len(calls)))
    del g
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(rotations):
            for c in calls:
                c()
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(max(1, math.ceil(settle_ms / (per_call * rotations * len(calls))))):
        graph.replay()
    end.record()
    end.synchronize()
    times = []
    first = clock.stamp() if clock is not None else None
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (rotations * len(calls)))
    mhz = None
    if clock is not None:
        last = clock.stamp()
        torch.cuda.synchronize()
        mhz = clock.mhz(first, last)
        clock.reset()
    return statistics.median(times), mhz


def compare(shapes, backends, repeat: int, reference_settle_ms: float = 300.0):
    from worker.backends import availability_problem
    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec, TimingOptions
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cuda")
    rows = []
    for rep in range(repeat):
        for backend in backends:
            spec = CATALOG[backend]
            if availability_problem(spec):
                print(f"skip {backend}: {availability_problem(spec)}", flush=True)
                continue
            for label, m, n, k in shapes:
                for l2 in ("hot", "cold"):
                    case = CaseSpec(backend=backend, m=m, n=n, k=k, timing=TimingOptions(l2=l2, budget_s=0.5, rounds=1))
                    worker_first = len(rows) % 2 == 0
                    ref = (
                        None
                        if worker_first
                        else reference_us(backend, m, n, k, l2 == "cold", settle_ms=reference_settle_ms)
                    )
                    rec = runner.run(case)
                    if ref is None:
                        ref = reference_us(backend, m, n, k, l2 == "cold", settle_ms=reference_settle_ms)
                    ours = rec.timing.median_us if rec.timing else None
                    row = dict(
                        repeat=rep + 1,
                        backend=backend,
                        label=label,
                        m=m,
                        n=n,
                        k=k,
                        l2=l2,
                        status=rec.status,
                        reason=rec.reason,
                        worker_us=ours,
                        reference_us=ref,
                        ratio=(ours / ref) if ours else None,
                        worker_first=worker_first,
                        verdict=rec.correctness.verdict if rec.correctness else None,
                    )
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def against_runs(run_dirs: list[Path], reference_settle_ms: float, passes: int = 3) -> str:
    """Markdown: each stored run's baseline cases (cold L2) against the reference: the median of `passes`
    timings of each case, one per pass over all cases (forward, then reversed, ...), with their spread."""
    return runs_against_reference(run_dirs, reference_settle_ms, passes)[0]


def runs_against_reference(
    run_dirs: list[Path], reference_settle_ms: float, passes: int = 3
) -> tuple[str, list[list[float]]]:
    """(against_runs' Markdown, each run's ratios to the reference)."""
    timings = baseline_timings(run_dirs)
    refs: dict[tuple, list[float]] = {}
    clocks: dict[tuple, list[float]] = {}
    clock = None
    if timings:  # the first graph timing of a process reads low (worker/measure/timing.py): the reference's too
        from worker.measure.streamclock import StreamClock

        clock = StreamClock.open()
        reference_us(*min(timings), True, settle_ms=reference_settle_ms)
    for p in range(passes):
        for cell in sorted(timings, reverse=bool(p % 2)):
            us, mhz = reference(*cell, True, settle_ms=reference_settle_ms, clock=clock)
            refs.setdefault(cell, []).append(us)
            if mhz:
                clocks.setdefault(cell, []).append(mhz)
    lines, ratios, works = reference_table(run_dirs, timings, refs, clocks, reference_settle_ms, passes)
    if timings and not works:
        why = StreamClock.problem if clock is None else "no stamp read a clock"
        lines.append(f"- no SM clock read in the references' stream ({why}): their work is not shown")
    references = {cell: statistics.median(t) for cell, t in refs.items()}
    lines += ["", *paired_against_references(run_dirs, references, works=works)]
    return "\n".join(lines) + "\n", ratios


def baseline_timings(run_dirs: list[Path]) -> dict[tuple, dict[int, object]]:
    """(backend, M, N, K) -> {run index: its Stats}: the stored runs' ok baseline GEMM cases, cold L2."""
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import RunStore

    found: dict[tuple, dict[int, object]] = {}
    for i, run in enumerate(run_dirs):
        for slot in load_slots(RunStore(run)):
            for _, rec in slot.records.values():
                c = rec.case
                if (
                    rec.status == "ok"
                    and rec.timing
                    and c.backend in BASELINES
                    and c.workload == "gemm"
                    and c.timing.l2 == "cold"
                ):
                    found.setdefault((c.backend, c.m, c.n, c.k), {})[i] = rec.timing
    return found


def agrees(ratio: float) -> bool:
    """Whether a worker/reference ratio is within AGREES of 1."""
    return abs(ratio - 1) <= AGREES


def marked(ratio: float) -> str:
    """A ratio as the tables print it, ` **` after one that does not agree."""
    return f"{ratio:.3f}{'' if agrees(ratio) else ' **'}"


def reference_table(
    run_dirs: list[Path],
    timings: dict[tuple, dict[int, object]],
    refs: dict[tuple, list[float]],
    clocks: dict[tuple, list[float]],
    reference_settle_ms: float,
    passes: int,
) -> tuple[list[str], list[list[float]], dict[tuple, float]]:
    """The runs' medians against the references' passes (`refs`, µs; `clocks`, the MHz each pass ran at):
    (Markdown lines, each run's ratios, each cell's reference work). Beside each run's time against the
    reference, its work against the reference's (time x the SM clock read in the stream, µs x MHz): a time
    that misses where the work agrees ran in another clock state than the reference, not slower work."""
    from worker.contract.pairing import work_per_round

    # Each pass's reference is one settled timing: its work is its time x the clock that timing ran at.
    works = {
        cell: statistics.median(t * c for t, c in zip(refs[cell], cs))
        for cell, cs in clocks.items()
        if len(cs) == len(refs[cell])
    }
    lines = [
        f"Each run's median against a reference settled for {reference_settle_ms:g} ms (benchmarks/fidelity/fidelity.py): "
        f"the median of {passes} timings of each case, one per pass over every case (forward, reversed, ...); "
        "`spread`: (largest - smallest) / median of those timings; `/ ref work`: the run's work (each round's "
        "time x the SM clock it ran at, read in its stream; their median) against the reference's.",
        "",
        "| backend | M | N | K | reference µs | spread | reference MHz | "
        + " | ".join(f"run {i + 1} µs | / ref | / ref work" for i in range(len(run_dirs)))
        + " |",
        "|---|---:|---:|---:|---:|---:|---:|" + "---:|---:|---:|" * len(run_dirs),
    ]
    within = [0] * len(run_dirs)
    within_work = [0] * len(run_dirs)
    counted = [0] * len(run_dirs)
    counted_work = [0] * len(run_dirs)
    ratios: list[list[float]] = [[] for _ in run_dirs]
    for cell, got in sorted(timings.items()):
        backend, m, n, k = cell
        ref = statistics.median(refs[cell])
        cells = []
        for i in range(len(run_dirs)):
            if i not in got:
                cells.append(" | | ")
                continue
            ratio = got[i].median_us / ref
            ratios[i].append(ratio)
            counted[i] += 1
            within[i] += agrees(ratio)
            work = work_per_round(got[i])
            by_work = ""
            if work and cell in works:
                work_ratio = statistics.median(work) / works[cell]
                counted_work[i] += 1
                within_work[i] += agrees(work_ratio)
                by_work = marked(work_ratio)
            cells.append(f"{got[i].median_us:.2f} | {marked(ratio)} | {by_work}")
        spread = (max(refs[cell]) - min(refs[cell])) / ref
        mhz = f"{statistics.median(clocks[cell]):.0f}" if cell in works else ""
        lines.append(
            f"| {backend} | {m} | {n} | {k} | {ref:.2f} | {100 * spread:.1f}% | {mhz} | " + " | ".join(cells) + " |"
        )
        print(lines[-1], flush=True)
    lines.append("")
    lines += [
        f"- run {i + 1} ({Path(r).name}): {within[i]} of {counted[i]} within ±5% of the reference"
        + (
            f"; its work within ±5% of the reference's on {within_work[i]} of {counted_work[i]}"
            if counted_work[i]
            else ""
        )
        for i, r in enumerate(run_dirs)
    ]
    return lines, ratios, works


# Issue 40: the head-to-head ratio of these two, paired in one shared GPU state, against the ratio of their
# references, each settled on its own.
PAIR = ("torch-fp8", "flashinfer-fp8-cublas")
PAIR_AGREES = 0.01


def paired_against_references(
    run_dirs: list[Path], references: dict[tuple, float], pair=PAIR, works: Optional[dict[tuple, float]] = None
) -> list[str]:
    """Markdown lines: per run and shape, B/A of `pair` from the run's paired samples (`fleetbench versus`'s
    interval), the ratio of the two cases' own medians and the ratio of their references (`references`: per
    (backend, M, N, K) the reference µs); whether paired / references is within PAIR_AGREES of 1. With `works`
    (per (backend, M, N, K) the reference's time x the SM clock it ran at, read in its stream), also the
    references' ratio of work: the pairs share one clock, each reference ran at its own, so where the two
    draw different power at the power cap their times' ratio holds the clocks' ratio too, their work's
    does not."""
    from orchestrator.analysis.headtohead import DEFAULT_TIE, contests_of
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import RunStore

    a, b = pair
    works = works or {}
    lines = [
        f"{b} / {a} head-to-head (the run's paired samples, 95% interval) against the ratio of their references"
        + (" (and of their work: time x the SM clock each ran at, read in its stream)" if works else "")
        + ":",
        "",
        "| run | M | N | K | paired B/A [95%] | B/A of the run's medians | B/A of the references | paired / references |"
        + (" B/A of the references' work | paired / references' work |" if works else ""),
        "|---:|---:|---:|---:|---|---:|---:|---:|" + ("---:|---:|" if works else ""),
    ]
    agree = [0] * len(run_dirs)
    agree_work = [0] * len(run_dirs)
    judged = [0] * len(run_dirs)
    judged_work = [0] * len(run_dirs)
    for i, run in enumerate(run_dirs):
        for slot in load_slots(RunStore(run)):
            for c in contests_of(slot, a, b, DEFAULT_TIE):
                ref_a, ref_b = references.get((a, c.m, c.n, c.k)), references.get((b, c.m, c.n, c.k))
                if c.ratio is None or ref_a is None or ref_b is None:
                    continue
                by_refs = ref_b / ref_a
                off = c.ratio / by_refs - 1
                judged[i] += 1
                agree[i] += abs(off) <= PAIR_AGREES
                line = (
                    f"| {i + 1} | {c.m} | {c.n} | {c.k} | {c.ratio:.4f} [{c.low:.4f}, {c.high:.4f}] | "
                    f"{c.b_us / c.a_us:.4f} | {by_refs:.4f} | {off:+.1%}{' **' if abs(off) > PAIR_AGREES else ''} |"
                )
                work_a, work_b = works.get((a, c.m, c.n, c.k)), works.get((b, c.m, c.n, c.k))
                if works and work_a and work_b:
                    by_work = work_b / work_a
                    off_work = c.ratio / by_work - 1
                    judged_work[i] += 1
                    agree_work[i] += abs(off_work) <= PAIR_AGREES
                    line += f" {by_work:.4f} | {off_work:+.1%}{' **' if abs(off_work) > PAIR_AGREES else ''} |"
                elif works:
                    line += " | |"
                lines.append(line)
    lines.append("")
    for i in range(len(run_dirs)):
        lines.append(
            f"- run {i + 1}: paired within {PAIR_AGREES:.0%} of the references' ratio on {agree[i]} of {judged[i]} shapes"
            + (f"; of their work's on {agree_work[i]} of {judged_work[i]}" if works else "")
        )
    return lines


def full_sweep(out: Path, backends):
    """The seed sweep through the worker CLI, as a host runs it; returns wall seconds and statuses."""
    from orchestrator.config.sweep import Sweep
    from worker.contract.schema import WorkerParams

    sweep = Sweep(name="glm5-tp8", backends=backends, shapes=[{"preset": "glm5-tp8"}])
    params = WorkerParams(run_id="fidelity", host="device", cases=sweep.cases(), device="cuda")
    p = out / "params.json"
    p.write_text(params.model_dump_json())
    results = out / "results.jsonl"
    results.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "worker", "supervise", "--params", str(p), "--results", str(results)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in results.read_text().splitlines()]
    cases = [r for r in records if r["kind"] == "case"]
    gpu_s = sum(r["duration_s"] for r in cases)
    return wall, gpu_s, records


def markdown(rows, facts, wall, case_s, records) -> str:
    lines = [
        f"GPU: {facts.get('gpu_name')} (CC {facts.get('compute_capability')}), driver {facts.get('driver')}, "
        f"CUDA {facts.get('cuda')}, torch {facts.get('torch')}, flashinfer {facts.get('flashinfer')}",
        "",
        "| repeat | backend | M | N | K | L2 | worker µs | reference µs | worker/reference | check |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        f = lambda v, p=2: "" if v is None else f"{v:.{p}f}"  # noqa: E731
        flag = " **" if r["ratio"] and not agrees(r["ratio"]) else ""
        lines.append(
            f"| {r['repeat']} | {r['backend']} | {r['m']} | {r['n']} | {r['k']} | {r['l2']} | {f(r['worker_us'])} | "
            f"{f(r['reference_us'])} | {f(r['ratio'], 3)}{flag} | {r['verdict'] or r['status']} |"
        )
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        within = sum(1 for x in ratios if agrees(x))
        lines += [
            "",
            f"worker/reference: {within} of {len(ratios)} within ±5%; range {min(ratios):.3f} .. {max(ratios):.3f}",
        ]
    cases = [r for r in records if r["kind"] == "case"]
    by_status: dict = {}
    for r in cases:
        by_status.setdefault(r["status"], []).append(r)
    lines += [
        "",
        f"Seed sweep through `python -m worker supervise`: {len(cases)} cases, wall {wall:.1f} s "
        f"(process start, imports and JIT included), {case_s:.1f} s inside cases.",
        "",
    ]
    for status, recs in sorted(by_status.items()):
        reasons = sorted({f"{r['case']['backend']}: {r['reason']}" for r in recs if r["reason"]})
        lines.append(f"- {status}: {len(recs)}" + ("".join(f"\n  - {x}" for x in reasons[:12]) if reasons else ""))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("fidelity-out"))
    ap.add_argument("--backends", default=",".join(BASELINES))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-sweep", action="store_true", help="skip the whole-sweep run")
    ap.add_argument(
        "--reference-settle-ms",
        type=float,
        default=300.0,
        help="back-to-back replays before the reference's timed ones (0: none, before issue 21)",
    )
    ap.add_argument("--runs", type=Path, nargs="+", help="stored runs to hold against the reference instead")
    ap.add_argument(
        "--reference-passes",
        type=int,
        default=3,
        help="with --runs: timings of the reference per case, one per pass over every case (default 3)",
    )
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    if args.runs:
        md = against_runs(args.runs, args.reference_settle_ms, args.reference_passes)
        if args.out.suffix == ".md":
            args.out.write_text(md)
        print(md)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    from worker.host.env import collect_facts, detect_device

    facts = collect_facts(detect_device("cuda")).model_dump()
    backends = [b for b in args.backends.split(",") if b]
    rows = compare(seed_shapes(), backends, args.repeat, args.reference_settle_ms)
    wall, case_s, records = (
        (0.0, 0.0, []) if args.no_sweep else full_sweep(args.out, backends + ["reference-nvfp4"] + FP4)
    )
    md = markdown(rows, facts, wall, case_s, records)
    (args.out / "fidelity.md").write_text(md)
    (args.out / "fidelity.json").write_text(
        json.dumps({"facts": facts, "rows": rows, "sweep_wall_s": wall, "sweep_case_s": case_s}, indent=1)
    )
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
