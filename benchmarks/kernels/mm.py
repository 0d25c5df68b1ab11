"""A bf16 GEMM as a user kernel (torch.mm): runs A and B of benchmarks/detection/verdicts.py."""

import torch

FAMILY = "bf16"


def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
