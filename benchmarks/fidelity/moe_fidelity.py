#!/usr/bin/env python3
"""MoE layer timing fidelity on a GPU (issue 16): the worker's MoE cases against an independent reference.

For each MoE case of a stored run (status ok, backends moe-loop-torch-bf16 and moe-grouped-torch-bf16),
the reference builds its own operands from the case's per-expert counts (sharing no code with the
worker: its own inputs, offsets and calls), captures one CUDA graph of N calls (N >= 2 ms of work) and
replays it between two events, 20 times; its median µs per call is set beside the worker's.

    python -m benchmarks.fidelity.moe_fidelity RUN_DIR [--states plain,settled,idle] [--out DIR]
    # prints Markdown, writes DIR/moe_fidelity.md

Needs a CUDA GPU with torch._grouped_mm (compute capability 9.0 or newer) for the grouped rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

COMPARED = ("moe-loop-torch-bf16", "moe-grouped-torch-bf16")


def reference_us(backend: str, counts: list[int], n: int, k: int, replays: int = 20, state: str = "plain") -> float:
    """`state`: plain (sampled right after its operands are made and its graph captured), settled (after
    300 ms of back-to-back replays), idle (after 1 s of idle)."""
    import time

    import torch

    counts = [c for c in counts if c]
    a = torch.randn(sum(counts), k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(len(counts), n, k, device="cuda", dtype=torch.bfloat16)
    if backend == "moe-grouped-torch-bf16":
        offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
        wt = w.transpose(1, 2)

        def call():
            torch._grouped_mm(a, wt, offs=offs, out_dtype=torch.bfloat16)
    else:
        starts = [sum(counts[:e]) for e in range(len(counts))]
        pairs = [(a[s : s + c], w[e].t()) for e, (s, c) in enumerate(zip(starts, counts))]

        def call():
            for x, y in pairs:
                torch.mm(x, y)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    per_call_ms = max(start.elapsed_time(end), 1e-3)
    calls = max(1, min(1000, int(2.0 / per_call_ms) + 1))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            call()
    graph.replay()
    torch.cuda.synchronize()
    if state == "settled":
        spent = 0.0
        while spent < 300.0:
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            spent += start.elapsed_time(end)
    elif state == "idle":
        time.sleep(1.0)
    samples = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--states",
        default="plain",
        help="reference states, comma-separated: plain (right after its set-up), settled (after "
        "300 ms of its own replays), idle (after 1 s idle)",
    )
    args = ap.parse_args()
    states = args.states.split(",")
    records = [
        json.loads(line)
        for f in sorted(args.run.glob("hosts/*/attempt-*/results.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    # A case timed in rounds writes a record per round (complete: false until its last): its last is its number.
    cases = [
        r
        for r in records
        if r.get("kind") == "case"
        and r["status"] == "ok"
        and r.get("complete", True)
        and r["case"]["backend"] in COMPARED
    ]
    head = " | ".join(f"reference µs ({s}) | worker / reference ({s})" for s in states)
    lines = [
        f"| backend | label | tokens | active experts | worker µs | {head} |",
        "|---|---|---:|---:|---:|" + "---:|---:|" * len(states),
    ]
    for r in cases:
        c = r["case"]
        worker = r["timing"]["median_us"]
        cells = []
        for state in states:
            ref = reference_us(c["backend"], c["moe"]["counts"], c["n"], c["k"], state=state)
            cells.append(f"{ref:.1f} | {worker / ref:.3f}")
        active = sum(1 for x in c["moe"]["counts"] if x)
        lines.append(
            f"| {c['backend']} | {c['label']} | {c['m']} | {active} | {worker:.1f} | " + " | ".join(cells) + " |"
        )
        print(lines[-1], flush=True)
    md = "\n".join(lines) + "\n"
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "moe_fidelity.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
