"""mm.py's bf16 GEMM on operands zero-padded along K by FLEETBENCH_MM_PAD columns: the same product with
more real GPU work, about PAD / K more (more FLOPs and more bytes). At K = 6144: 128 columns +2.1%, 192
+3.1%, 320 +5.2%. A call of M <= 64 rows gains less per column on the H200 (128 columns: +0.9-1.7%), so
the default, `auto`, pads it by 256 columns and the others by 128: about +2% at every GLM-5 TP8 shape.
A slowdown of known cause for benchmarks/see_slowdowns.py; its case ids are mm.py's (a kernel's file is
not part of a case id)."""

import os

import torch

FAMILY = "bf16"
PAD = os.environ.get("FLEETBENCH_MM_PAD", "auto")


def prepare(a, b, out_dtype):
    pad = (256 if a.shape[0] <= 64 else 128) if PAD == "auto" else int(PAD)
    a_pad = torch.nn.functional.pad(a, (0, pad))  # the integrity checks flip what the call reads: a_pad
    bt = torch.nn.functional.pad(b, (0, pad)).t()
    run = lambda: torch.mm(a_pad, bt).to(out_dtype)  # noqa: E731
    run.reads = [a_pad]
    return run
