"""mm.py's bf16 GEMM on operands zero-padded along K: the same product with more real GPU work (more FLOPs
and more bytes). How many columns comes from FLEETBENCH_MM_PAD:
  - a number: that many columns at every shape;
  - a JSON file {"MxNxK": columns, ...}: per shape, as `benchmarks/see_slowdowns.py calibrate` measures
    them for a chosen effect (a column adds less time at some shapes than at others);
  - `auto` (the default): 256 columns at M <= 64, 128 above, roughly +2% at the GLM-5 TP8 shapes.
A slowdown of known cause for benchmarks/see_slowdowns.py; its case ids are mm.py's (a kernel's file is
not part of a case id)."""

import json
import os

import torch

FAMILY = "bf16"
PAD = os.environ.get("FLEETBENCH_MM_PAD", "auto")


def columns(m: int, n: int, k: int) -> int:
    if PAD == "auto":
        return 256 if m <= 64 else 128
    if PAD.endswith(".json"):
        with open(PAD) as f:
            table = json.load(f)
        key = f"{m}x{n}x{k}"
        if key not in table:
            raise ValueError(f"{PAD} has no padding for {key}")
        return int(table[key])
    return int(PAD)


def prepare(a, b, out_dtype):
    pad = columns(a.shape[0], b.shape[0], a.shape[1])
    a_pad = torch.nn.functional.pad(a, (0, pad))  # the integrity checks flip what the call reads: a_pad
    bt = torch.nn.functional.pad(b, (0, pad)).t()
    run = lambda: torch.mm(a_pad, bt).to(out_dtype)  # noqa: E731
    run.reads = [a_pad]
    return run
