"""mm.py's bf16 GEMM on operands zero-padded along K by FLEETBENCH_MM_PAD columns (default 128): the same
product with more real GPU work, about PAD / K more (more FLOPs and more bytes; a launch-bound call
gains less). At K = 6144: 128 columns +2.1%, 192 +3.1%, 320 +5.2%. A slowdown of known cause for
benchmarks/see_slowdowns.py; its case ids are mm.py's (a kernel's file is not part of a case id)."""
import os

import torch

FAMILY = "bf16"
PAD = int(os.environ.get("FLEETBENCH_MM_PAD", "128"))


def prepare(a, b, out_dtype):
    a_pad = torch.nn.functional.pad(a, (0, PAD))  # the integrity checks flip what the call reads: a_pad
    bt = torch.nn.functional.pad(b, (0, PAD)).t()
    run = lambda: torch.mm(a_pad, bt).to(out_dtype)  # noqa: E731
    run.reads = [a_pad]
    return run
