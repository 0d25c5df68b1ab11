"""What ending a CUDA process costs: a process holding what a sweep's worker holds at its end (a CUDA
context, buffers, captured graphs) ended by the interpreter's teardown, against ended the way
`python -m worker run` ends (worker/__main__.py end_process: os._exit once every record is written).

    python -m benchmarks.cost.exit_cost [--repeat 2] [--out FILE.md]

Each repetition starts one child of each kind, in turn. A child allocates 8 fp32 4096x4096 buffers,
captures 40 CUDA graphs of 50 matmuls each, synchronizes, prints the time and ends. The parent reads
the seconds from that line to the child's end, as a sweep's supervisor waits for its child. Needs a
CUDA GPU. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import publish

KINDS = ("teardown", "end_process")


def child(kind: str) -> int:
    import torch

    buffers = [torch.randn(4096, 4096, device="cuda") for _ in range(8)]
    stream = torch.cuda.Stream()
    graphs = []
    for i in range(40):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            torch.mm(buffers[0], buffers[1])  # warm on the capture stream first
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(50):
                torch.mm(buffers[i % 8], buffers[(i + 1) % 8])
        graphs.append(graph)
    torch.cuda.synchronize()
    print(repr(time.time()), flush=True)
    if kind == "end_process":
        from worker.__main__ import end_process

        end_process(0)
    return 0


def one(kind: str) -> float:
    """Seconds from the child's last line to its end, as its parent sees it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.cost.exit_cost", "--child", kind], stdout=subprocess.PIPE, text=True
    )
    out, _ = proc.communicate(timeout=600)
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"exit_cost: the {kind} child exited with {proc.returncode}")
    return ended - float(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    ap.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    for _ in range(args.repeat):
        for kind in KINDS:
            seconds[kind].append(one(kind))
    lines = [
        "# What ending a CUDA process costs",
        "",
        f"`python -m benchmarks.cost.exit_cost --repeat {args.repeat}`: seconds from a child's last line to its end",
        "(8 fp32 4096x4096 buffers and 40 captured graphs held), one child of each kind per repetition, in turn.",
        "",
        "| ended by | seconds, each repetition | median |",
        "|---|---|---:|",
    ]
    for kind in KINDS:
        what = "the interpreter's teardown" if kind == "teardown" else "end_process (os._exit)"
        each = ", ".join(f"{s:.3f}" for s in seconds[kind])
        lines.append(f"| {what} | {each} | {statistics.median(seconds[kind]):.3f} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
