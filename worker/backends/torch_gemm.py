"""torch baselines: bf16 matmul, fp8 and NVFP4 through torch._scaled_mm.

Each call names, as `fn.reads`, the tensors holding operand A as it reads them (per input set): the
integrity checks flip their sign in place and expect the output negated (worker/check/integrity.py)."""

from __future__ import annotations

from typing import Callable

import torch

from ..check import nvfp4
from ..contract.catalog import BackendSpec
from .fp8 import quantize_e4m3

Sets = list[tuple[torch.Tensor, torch.Tensor]]


def prepare(spec: BackendSpec, sets: Sets, out_dtype: torch.dtype) -> Callable[[int], torch.Tensor]:
    """A function running the GEMM on input set i; inputs are converted here, outside timing."""
    m, n = sets[0][0].shape[0], sets[0][1].shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=sets[0][0].device)
    if spec.family == "bf16":
        mats = [(a.to(out_dtype), b.to(out_dtype)) for a, b in sets]

        def run_bf16(i: int) -> torch.Tensor:
            a, b = mats[i]
            return torch.mm(a, b.t(), out=out)

        run_bf16.reads = [[a] for a, _ in mats]
        return run_bf16

    if spec.family == "fp8":
        quant = [(quantize_e4m3(a), quantize_e4m3(b)) for a, b in sets]

        def run_fp8(i: int) -> torch.Tensor:
            (a8, sa), (b8, sb) = quant[i]
            # b8.t() is the column-major [K, N] operand cuBLASLt wants.
            return torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)

        run_fp8.reads = [[a8] for (a8, _), _ in quant]
        return run_fp8

    # NVFP4: torch has no quantizer, so operands come from our reference quantizer (swizzled scales);
    # the global scales are applied to the output, as torchao does.
    ops = []
    for a, b in sets:
        qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
        fp4 = torch.float4_e2m1fn_x2
        ops.append(
            (
                qa.packed.view(fp4),
                qb.packed.view(fp4),
                nvfp4.swizzle_scales(qa.scales),
                nvfp4.swizzle_scales(qb.scales),
                (1.0 / (qa.global_scale * qb.global_scale)).to(out_dtype),
            )
        )

    def run_nvfp4(i: int) -> torch.Tensor:
        a4, b4, sa, sb, alpha = ops[i]
        return torch._scaled_mm(a4, b4.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype) * alpha

    run_nvfp4.reads = [[op[0]] for op in ops]
    return run_nvfp4
