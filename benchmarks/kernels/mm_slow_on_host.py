"""A bf16 GEMM (torch.mm) made slower on purpose on a host whose env sets FLEETBENCH_SLOW_KERNEL=1: there it
multiplies by a copy of B laid out the other way, made on every call (one more kernel, and cuBLAS's kernel
for the other layout), with the same result. benchmarks/fleet/profile_check.py runs it on three sshd hosts of one
GPU, one of them slowed, for `diff --across-hosts --profile` to name the difference."""

import os

import torch

FAMILY = "bf16"


def prepare(a, b, out_dtype):
    bt = b.t()
    if os.environ.get("FLEETBENCH_SLOW_KERNEL") == "1":
        return lambda: torch.mm(a, bt.contiguous()).to(out_dtype)
    return lambda: torch.mm(a, bt).to(out_dtype)
