"""An fp8 user kernel that quantizes its operands in prepare, as the built-in fp8 backends do, so the
timed call is the GEMM alone. Its call reads `a8`, not the `a` it was given: it says so with
`run.reads`, and fleetbench's integrity check flips the sign of what the call reads (an e4m3 sign bit)
and expects the output negated (worker/check/integrity.py). Without `reads` it would be flagged: its result
could not follow a change of `a`, exactly like a kernel that caches its result."""

import torch

FAMILY = "fp8"  # checked against the product of the same e4m3-quantized operands
MIN_CC = (8, 9)  # e4m3 tensor cores (torch._scaled_mm)


def _e4m3(x):
    scale = x.abs().max().float().clamp(min=1e-12) / 448.0
    return (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale.reshape(1)


def prepare(a, b, out_dtype):
    (a8, sa), (b8, sb) = _e4m3(a), _e4m3(b)
    b8t = b8.t()  # the column-major [K, N] operand cuBLASLt wants

    def run():
        return torch._scaled_mm(a8, b8t, scale_a=sa, scale_b=sb, out_dtype=out_dtype)

    run.reads = [a8]  # operand A as the call reads it
    return run
