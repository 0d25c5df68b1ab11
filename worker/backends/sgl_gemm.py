"""sgl-kernel: cutlass_scaled_fp4_mm and fp8_scaled_mm.

- `scaled_fp4_quant(x, global_scale)` -> (uint8 [M, K/2], float8_e4m3fn swizzled scales);
- `cutlass_scaled_fp4_mm(a, b, sf_a, sf_b, alpha, out_dtype)` with b the (N, K/2) row-major weight,
  NOT transposed; K % 32 == 0 and N % 32 == 0 (declared in the catalog);
- `fp8_scaled_mm(a [M, K] row-major, b [K, N] column-major, scales_a (M,), scales_b (N,), out_dtype)`.
Every argument goes by keyword (a reordered parameter cannot take another's value); the names are
checked against a signature record of the sgl-kernel wheel (tests/contracts/, tests/test_fp4_contracts.py).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..check import nvfp4
from ..contract.catalog import BackendSpec
from .fp8 import quantize_e4m3

Sets = list[tuple[torch.Tensor, torch.Tensor]]


def prepare(spec: BackendSpec, sets: Sets, out_dtype: torch.dtype) -> Callable[[int], torch.Tensor]:
    import sgl_kernel

    if spec.family == "fp8":
        quant = []
        for a, b in sets:
            (a8, sa), (b8, sb) = quantize_e4m3(a), quantize_e4m3(b)
            m, n = a.shape[0], b.shape[0]
            quant.append((a8, b8.t(), sa.expand(m).contiguous(), sb.expand(n).contiguous()))

        def run_fp8(i: int) -> torch.Tensor:
            a8, b8t, sa, sb = quant[i]
            return sgl_kernel.fp8_scaled_mm(mat_a=a8, mat_b=b8t, scales_a=sa, scales_b=sb, out_dtype=out_dtype)

        run_fp8.reads = [[q[0]] for q in quant]  # operand A as the call reads it (worker/check/integrity.py)
        return run_fp8

    ops = []
    for a, b in sets:
        gs_a = nvfp4.global_scale_for(a).reshape(1)
        gs_b = nvfp4.global_scale_for(b).reshape(1)
        a4, a_sf = sgl_kernel.scaled_fp4_quant(input=a, input_global_scale=gs_a)
        b4, b_sf = sgl_kernel.scaled_fp4_quant(input=b, input_global_scale=gs_b)
        ops.append((a4, b4, a_sf, b_sf, (1.0 / (gs_a * gs_b)).to(torch.float32)))

    def run_fp4(i: int) -> torch.Tensor:
        a4, b4, a_sf, b_sf, alpha = ops[i]
        return sgl_kernel.cutlass_scaled_fp4_mm(
            a=a4, b=b4, block_scale_a=a_sf, block_scale_b=b_sf, alpha=alpha, out_dtype=out_dtype
        )

    run_fp4.reads = [[op[0]] for op in ops]
    return run_fp4
